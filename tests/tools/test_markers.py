"""The generated blocks of the pages: one way to find and rewrite the text between two markers."""

from __future__ import annotations

import pytest

from dpgen.reproduce.markers import between, replace_between, wrapped_command, write_between

S, E = "<!-- x:start -->", "<!-- x:end -->"


def test_the_block_between_the_markers_is_replaced_and_the_rest_kept():
    text = f"head\n{S}\nold\nlines\n{E}\ntail\n"
    new = replace_between(text, S, E, "new")
    assert new == f"head\n{S}\nnew\n{E}\ntail\n" and between(new, S, E) == "new"
    assert replace_between(new, S, E, "new") == new  # rewriting the same block changes nothing


def test_a_page_without_markers_is_refused_by_name_or_gets_the_block_at_its_end(tmp_path):
    with pytest.raises(SystemExit, match=r"error: docs/x.md has no .* markers"):
        replace_between("no markers\n", S, E, "b", page="docs/x.md")
    assert replace_between("no markers\n", S, E, "b", append=True) == f"no markers\n\n{S}\nb\n{E}\n"
    assert between(f"{S} only", S, E) is None and between(f"{E} before {S}", S, E) is None
    page = tmp_path / "new.md"
    write_between(page, S, E, "b")
    write_between(page, S, E, "c")
    assert page.read_text() == f"# Reproduction\n\n{S}\nc\n{E}\n"


def test_a_long_command_is_shown_on_short_continued_lines_that_paste_back_into_it():
    command = ("python train.py experiment=mnist_dpswflow 'model.representation={kind:dct,n_components:100}' "
               + " ".join(f"model.setting_{i}=value_{i}" for i in range(12)))
    lines = wrapped_command(command, width=60).splitlines()
    assert len(lines) > 3 and all(len(line) <= 60 for line in lines)
    assert all(line.endswith(" \\") for line in lines[:-1]) and all(line.startswith("    ") for line in lines[1:])
    assert " ".join(line.removesuffix(" \\").strip() for line in lines) == command  # the quoted word kept whole
    assert wrapped_command("python train.py") == "python train.py"

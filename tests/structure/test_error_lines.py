"""Docs that cannot drift: every `error:` line the code can print (collected from the source by
scripts/error_lines.py) is on docs/guides/troubleshooting.md, whose generated index is current; getting-started
names every `dpgen` subcommand of the CLI's parser."""

from __future__ import annotations

import importlib.util
import sys

from tests.helpers import ROOT


def _error_lines():
    spec = importlib.util.spec_from_file_location("error_lines", ROOT / "scripts" / "error_lines.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("error_lines", mod)
    spec.loader.exec_module(mod)
    return mod


def test_every_error_line_of_the_code_is_on_the_troubleshooting_page():
    lines = _error_lines()
    lacking = lines.missing()
    assert not lacking, "add them (python scripts/error_lines.py --write): " + "; ".join(
        f"{x.module}:{x.lineno} {x.words!r}" for x in lacking[:20])


def test_the_pages_index_of_error_lines_is_the_one_the_source_gives():
    lines = _error_lines()
    text = lines.PAGE.read_text(encoding="utf-8")
    generated = text[text.index(lines.BEGIN):text.index(lines.END) + len(lines.END)]
    assert generated == lines.index(lines.collect()), "python scripts/error_lines.py --write"


def test_the_collector_finds_the_raise_sites_and_a_new_line_the_page_lacks(tmp_path):
    lines = _error_lines()
    words = [x.words for x in lines.collect() if x.words]
    for known in ("accountant.epsilon must be a positive", "but this machine has no CUDA", "write a .npz file or"):
        assert any(known in w for w in words), known
    pkg = tmp_path / "dpgen"
    pkg.mkdir()
    (pkg / "new.py").write_text("from dpgen.errors import ConfigError\n\n\ndef f(x):\n"
                                "    raise ConfigError(f\"model.brand_new={x}: a fault nobody documented; fix: set it\")\n")
    (lacking,) = lines.missing(root=tmp_path)
    assert lacking.words == "model.brand_new=" and lacking.module == "dpgen/new.py"


def test_getting_started_names_every_dpgen_subcommand():
    from dpgen.cli import COMMANDS, parser

    names = set(parser()._subparsers._group_actions[0].choices)  # the parser's own subcommands
    assert names == set(COMMANDS)
    page = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    assert not [n for n in sorted(names) if f"`{n}`" not in page]

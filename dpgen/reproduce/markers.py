"""Generated blocks in hand-written pages: the text between two HTML-comment markers, rewritten by a command."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path


def between(text: str, start: str, end: str) -> str | None:
    """The block between the markers (without the line breaks that follow ``start`` and precede ``end``), or None
    when ``text`` lacks them."""
    if start not in text or end not in text.split(start, 1)[1]:
        return None
    inner = text.split(start, 1)[1].split(end, 1)[0]
    return inner.removeprefix("\n").removesuffix("\n")


def replace_between(text: str, start: str, end: str, block: str, *, page: Path | str = "the page",
                    append: bool = False) -> str:
    """``text`` with the block between the markers replaced: ``start``, ``block`` and ``end`` on lines of their own.
    Without the markers the marked block is appended when ``append``; otherwise SystemExit names ``page`` and the
    markers to add."""
    if between(text, start, end) is not None:
        head, rest = text.split(start, 1)
        return f"{head}{start}\n{block}\n{end}{rest.split(end, 1)[1]}"
    if append:
        return text.rstrip("\n") + f"\n\n{start}\n{block}\n{end}\n"
    raise SystemExit(f"error: {page} has no {start} / {end} markers: add them where the generated block goes")


def write_between(path: Path, start: str, end: str, block: str, *, new_page: str = "# Reproduction\n",
                  append: bool = True) -> None:
    """Rewrite the marked block of the page at ``path`` (a new page starts as ``new_page``; a page without the
    markers gets the block at its end, or, without ``append``, is refused by name)."""
    text = path.read_text() if path.exists() else new_page
    path.write_text(replace_between(text, start, end, block, page=path, append=append))


def wrapped_command(command: str, width: int = 100) -> str:
    """``command`` as shell lines of at most about ``width`` characters, continued by `` \\`` (a quoted word is
    kept whole), so a generated page shows a long command in a code block a reader can paste."""
    lines, line = [], ""
    for word in re.findall(r"'[^']*'|\S+", command):
        if line and len(line) + 1 + len(word) > width - 2:
            lines.append(line + " \\")
            line = "    " + word
        else:
            line = f"{line} {word}" if line else word
    return "\n".join([*lines, line])


def wrapped_prose(text: str, width: int = 110) -> str:
    """A generated paragraph as lines of at most ``width`` characters (markdown joins them again)."""
    return textwrap.fill(text, width, break_long_words=False, break_on_hyphens=False)

"""The table of every registered kind of private release (docs/privacy/mechanisms.md shows it, a test keeps it
in step).  Its own module: it reads the registry after every mechanism module has registered its kinds."""

from __future__ import annotations

from . import moments  # noqa: F401  (its kinds register when it is imported)
from .mechanisms import MECHANISMS


def kinds_table() -> str:
    """The markdown table ``| kind | class | one release | used by |`` of dpgen's registered mechanisms."""
    rows = ["| kind | class | one release | used by |", "|---|---|---|---|"]
    rows += [f"| `{kind}` | `{cls.__name__}` | {cls.release_formula} | {cls.used_by} |"
             for kind, cls in sorted(MECHANISMS.items()) if cls.__module__.startswith("dpgen.")]
    return "\n".join(rows) + "\n"

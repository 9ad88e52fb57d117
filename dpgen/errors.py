"""User-caused faults: one class, one line.

A :class:`UserError` is a fault the user can fix (a bad setting, a missing or damaged data file, an
output folder that cannot be written, a W&B login that is missing).  Its message names the file or
setting and says how to fix it; ``train.py`` prints it as ONE line ``error: <message>`` on stderr
and exits with code 2, without a traceback, and removes the run folder if the run had not written
anything yet.  Anything else is a bug and keeps its traceback.

:class:`ConfigError` (a bad setting) and ``dpgen.data.base.DatasetNotFoundError`` (missing
files) are subclasses; raising either is always right.  docs/guides/troubleshooting.md lists every
such error with its fix.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class UserError(Exception):
    """A fault the user can fix; the message names the file or setting and the fix."""


class ConfigError(UserError, ValueError):
    """A setting is invalid; the message names it and says how to fix it."""


class DataFileError(UserError):
    """A dataset file exists but is truncated or corrupted (its checksum or its contents are wrong)."""


def did_you_mean(word: str, choices: Iterable[str], n: int = 3, cutoff: float = 0.6) -> list[str]:
    """The ``choices`` closest to ``word`` (best first; empty when none is close)."""
    return difflib.get_close_matches(word, list(choices), n=n, cutoff=cutoff)


def suggestion(word: str, choices: Iterable[str], n: int = 3) -> str:
    """`` did you mean 'a' or 'b'?`` for the close choices, else an empty string."""
    close = did_you_mean(word, choices, n=n)
    return f" did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def one_line(message: str) -> str:
    """``message`` as one line: line breaks (e.g. a list of expected files) become ``; ``."""
    parts = [p.strip() for p in str(message).splitlines() if p.strip()]
    return "; ".join(parts)

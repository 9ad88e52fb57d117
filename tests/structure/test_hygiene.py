"""The product speaks to its users: no process history, no machine paths, no files outside the repository.

``git grep`` over every tracked file of the product for issue or stop numbers, absolute paths of a
machine (``/home/...``, ``/tmp/...``, ...) and references to specification files that a clone does not
have.  Run paths belong in relative form (evidence keeps the command and paths relative to where it ran).
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.helpers import ROOT

PATHS = ["dpgen", "configs", "docs", "scripts", "tests", "README.md", "train.py", "Makefile", "mkdocs.yml",
         "pyproject.toml", ":(exclude)tests/structure/test_hygiene.py"]  # this file holds the patterns and samples
FORBIDDEN = {
    "an issue number": r"issue[- ]?#?[0-9]+",
    "a stop number": r"\bstop [0-9]+",
    "an absolute machine path": r"/(home|tmp|work|root|mnt)/",
    "a specification file outside the repository": r"shared/specs",
}


def git_grep(pattern: str) -> list[str]:
    """Lines of tracked product files matching ``pattern`` (extended regex, case-insensitive)."""
    r = subprocess.run(["git", "grep", "-n", "-I", "-i", "-E", pattern, "--", *PATHS], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode in (0, 1), r.stderr  # 1: no match
    return r.stdout.splitlines()


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout")
@pytest.mark.parametrize("what", sorted(FORBIDDEN))
def test_no_forbidden_text_in_the_product(what):
    hits = git_grep(FORBIDDEN[what])
    assert not hits, f"{what} in the product:\n" + "\n".join(h[:200] for h in hits[:20])


def test_the_patterns_catch_what_they_are_for():
    import re

    for what, sample in (("an issue number", "as issue 13 asks"), ("a stop number", "(Stop 21 measurements)"),
                         ("an absolute machine path", "cache=/work/runs/x"),
                         ("a specification file outside the repository", "see shared/specs/dpswd.md")):
        assert re.search(FORBIDDEN[what], sample, re.I), what

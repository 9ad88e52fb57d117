"""The name a sub-command's argparse usage lines print (no torch: the command line stays fast)."""

from __future__ import annotations

import sys


def with_prog(prog: str, fn, *args):
    """Call ``fn`` with ``sys.argv[0]`` set to ``prog``, so that its argparse usage lines name the command."""
    saved = sys.argv[0]
    sys.argv[0] = prog
    try:
        return fn(*args)
    finally:
        sys.argv[0] = saved

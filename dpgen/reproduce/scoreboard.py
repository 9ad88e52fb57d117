"""The reproduction scoreboard of docs/reproduction/ (one page per paper), rendered from a committed evidence store.

Two steps, neither of which trains anything:

* ``collect RUN_DIR...`` reads each run folder (``results.json`` written by ``train.py``, plus
  ``.hydra/overrides.yaml`` and ``.hydra/config.yaml``), matches it against the registry and
  writes the fields the tables need to ``evidence/<experiment>__<hash>__seed<k>.json``
  (one small file per run: utility metrics, ε per accountant, guarantee label, σ, steps, run time,
  the command, git commit if recorded, date).  Runs that match no registry cell are listed with
  the reason and not stored.  Then it re-renders the doc (``--no-render`` to skip).
* ``render`` (``make reproduce``) rebuilds the tables between ``<!-- scoreboard:start -->`` and
  ``<!-- scoreboard:end -->`` of every ``docs/reproduction/<paper>.md`` (and the verdict summary of
  ``docs/reproduction/index.md``) from the evidence store alone, so a fresh
  clone regenerates the doc byte for byte.  ``check`` exits 1 when the doc and the store disagree.

The code: ``registry.py`` (the papers' numbers and the table layout), ``evidence.py`` (the store:
collect, load, match a run to a cell), ``render.py`` (the pages and the verdicts below); this module is
the command line.

Adding a run (one command)::

    dpgen reproduce collect outputs/2026-01-01/*        # any number of run folders

The registry declares every row once: the paper's number and where the spec quotes it, the
tolerance, and which experiment (+ overrides, + resolved-config values) defines each of the three
cells "paper setting (ours)", "honest (ours)", "non-private (ours)".  A run matches a cell when its
experiment is the cell's, its overrides (minus bookkeeping such as ``seed``, ``logger``,
``hydra.*``) are exactly the cell's ``overrides`` plus keys the cell lets ``vary`` (e.g. a
shortened schedule, shown in the cell), and its resolved config has the cell's ``config`` values
(e.g. the USPS layout, which separates runs of the same command on older code).

Verdict per row (computed, never typed):

* **reproduced (within tolerance)**: the mean over seeds of the decisive cell is within the
  tolerance of the paper's number for every comparable metric.  Decisive: "paper setting (ours)"
  for a private paper number; for a non-private paper number the non-private cell (and the paper
  setting cell when one is declared).  A non-private run never "reproduces" a private number.
  When a private row declares no paper setting (the paper's recipe is not implemented, e.g. the
  released DP-DANN's per-tensor clipping, WDP's batch-mean clipping), the honest cell decides: a
  rigorous run at the paper's ε that reaches the paper's number reproduces it, and the detail says
  so ("honest (ours) … rigorous").
* FID rows whose runs can only measure the offline domain FID (no Inception weights here) are judged
  by a **ratio** when the row declares one (``FidRatio``, DPSWflow Table 1): ours
  = mean domain FID of the decisive cell / mean domain FID of the reference cell (same autoencoder
  settings), paper = paper FID / paper reference FID, within the tolerance when ours ≤
  (paper FID + tolerance) / paper reference FID.  The detail names it a ratio.
* **explained by measurement**: not within tolerance, and the registry carries a note that cites
  a measured number and its command;
* **open**: everything else (including "not run").

A metric is comparable only when the run measured it the way the paper did (``requires``): FID
needs the Inception extractor; the offline ``domain`` FID is shown, marked, and not judged.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .evidence import collect, report_collected, shown_path
from .render import render, stale_pages


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect", help="store the evidence of finished run folders, then render")
    c.add_argument("runs", nargs="+", type=Path)
    c.add_argument("--commit", help="git commit the runs were made with (results.json records none; e.g. "
                   "$(git -C <checkout> rev-parse --short HEAD) for runs of another checkout)")
    c.add_argument("--no-render", action="store_true")
    sub.add_parser("render", help="rebuild the scoreboard blocks of docs/reproduction/*.md from the store")
    sub.add_parser("check", help="exit 1 when a docs/reproduction page differs from a render of the store")
    args = ap.parse_args(argv)
    if args.cmd == "collect":
        report_collected(*collect(args.runs, commit=args.commit))
    if args.cmd == "render" or args.cmd == "collect" and not args.no_render:
        changed = render()
        print("updated " + ", ".join(map(shown_path, changed)) if changed else "docs/reproduction/ unchanged")
        return 0
    if args.cmd == "collect":
        return 0
    stale = stale_pages()
    if stale:
        print(f"{', '.join(map(shown_path, stale))} differ from the evidence store: run `make reproduce`", file=sys.stderr)
        return 1
    print("docs/reproduction/ matches the evidence store")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

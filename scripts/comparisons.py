"""Each comparison of the README and docs/utility.md, recomputed from every stored run (dpgen/reproduce/claims.py):

    python scripts/comparisons.py

prints the sentence each page must hold between its ``<!-- compare:<id> -->`` markers (the test's own words), or
why a comparison cannot be made yet (too few runs on its device)."""

from __future__ import annotations

from dpgen.reproduce.claims import COMPARISONS, compare, summary
from dpgen.reproduce.evidence import claim_runs
from dpgen.reproduce.store import load_store


def main() -> int:
    runs_of = claim_runs(load_store())
    for cmp in COMPARISONS:
        try:
            print(f"{cmp.id}: {summary(compare(cmp, runs_of))}")
        except ValueError as e:
            print(f"{cmp.id}: {e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

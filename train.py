"""dpgen entry point: ``python train.py experiment=<dataset>_<method> [overrides]`` (as ``dpgen train``)."""

import sys

from dpgen.app import run_app

if __name__ == "__main__":
    raise SystemExit(run_app(sys.argv[1:]))

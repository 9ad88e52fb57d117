"""dpgen entry point: ``python train.py experiment=<dataset>_<method> [overrides]`` (as ``dpgen train``)."""

import gc
import sys

from dpgen.app import run_app

if __name__ == "__main__":
    # This process runs one run, then exits: what is alive at a freeze is moved to a permanent generation that
    # the collector's full passes skip.  The objects of the modules imported so far are never garbage; at the
    # end, the interpreter's exit need not scan the ~275,000 objects of torch, scipy, scikit-learn and the run
    # (about 0.6 s of CPU; the run's files are closed and its W&B run finished by then).
    gc.freeze()
    code = run_app(sys.argv[1:])
    gc.freeze()
    raise SystemExit(code)

"""The ``dpgen`` console command.

    dpgen train experiment=mnist_dpswd accountant.epsilon=5     # = python train.py ... (Hydra overrides)
    dpgen train --nproc 2 experiment=mnist_dpsgd                 # one run on 2 processes (torchrun)
    dpgen sample outputs/digits_moments/<run> --n 10000 --out synth.npz
    dpgen evaluate outputs/digits_moments/<run>                  # evaluate a run again from its release
    dpgen presets --method dpswd                                 # list presets
    dpgen report multirun/<sweep>                                # privacy-utility figure + tables of a sweep
    dpgen reproduce render                                       # the papers' scoreboard
    dpgen audit experiment=digits_moments                        # empirical privacy audit
    dpgen bench                                                  # benchmarks -> docs/benchmarks.md

Each subcommand is a module: either ``add_arguments(parser)`` + ``run(args) -> int`` (parsed here), or
``main(argv) -> int`` with its own parser (the rest of the command line is passed through, so
``dpgen report --help`` prints the report's own options).
"""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module, one line for `dpgen --help`)
COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("dpgen.cli", "train an experiment preset: Hydra overrides, as `python train.py ...` (--nproc N: N processes)"),
    "sample": ("dpgen.export.cli", "sample a synthetic dataset from a run's release, with its privacy card"),
    "evaluate": ("dpgen.eval.cli", "evaluate a finished run again from its release (public data only, no privacy cost)"),
    "presets": ("dpgen.presets", "list the experiment presets (filter by --method / --dataset); check them"),
    "report": ("dpgen.report", "summarise a Hydra multirun sweep: privacy-utility figure and tables"),
    "reproduce": ("dpgen.reproduce", "the papers' tables and figures: scoreboard render / collect, paper drivers"),
    "audit": ("dpgen.audit.cli", "empirical privacy audit of a preset's releases"),
    "bench": ("dpgen.bench.run", "benchmarks against the reference libraries -> docs/benchmarks.md"),
}

# whole commands that read and write the checkout's docs/ and configs/: refused from an installed package before their
# module (and torch) loads
CHECKOUT_ONLY = ("bench",)


def train(argv: list[str]) -> int:
    """Run the Hydra application of one training run (:mod:`dpgen.app`) with ``argv`` as its command line.

    ``--nproc N`` (N > 1): one run on N processes, ``torchrun --standalone --nproc-per-node N -m dpgen train ...``
    (``dpgen.utils.launch``; gloo on CPU, NCCL on GPUs)."""
    from .app import run_app

    nproc, argv = _nproc(argv)
    if nproc is None:
        return 2
    if nproc > 1:
        from .preflight import preflight
        from .utils.cluster import slurm_tasks_problem

        problem = slurm_tasks_problem() or preflight(argv, nproc=nproc)  # once, before N processes start (no torch)
        if problem is not None:
            print(f"error: {problem}", file=sys.stderr)
            return 2
        from .utils.launch import launch

        return launch(argv, nproc)
    return run_app(argv)


def _nproc(argv: list[str]) -> tuple[int | None, list[str]]:
    """``--nproc N`` / ``--nproc=N`` taken out of ``argv`` (default 1); None after printing the error line."""
    rest, nproc, i = [], 1, 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--nproc" or arg.startswith("--nproc="):
            value = arg.partition("=")[2] if "=" in arg else (argv[i + 1] if i + 1 < len(argv) else "")
            i += 1 if "=" in arg else 2
            if not value.isdigit() or int(value) < 1:
                print(f"error: dpgen train --nproc takes a number of processes >= 1, got {value!r}", file=sys.stderr)
                return None, argv
            nproc = int(value)
            continue
        rest.append(arg)
        i += 1
    return nproc, rest


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="dpgen", description="Differentially private generative modelling and "
                                 "domain adaptation with optimal transport.",
                                 epilog="`dpgen COMMAND --help` shows a command's options.")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (_module, help_) in COMMANDS.items():
        sub.add_parser(name, help=help_, add_help=False)
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        ap = parser()
        if not argv:
            ap.print_help()
            return 2
        ap.parse_args(argv)  # --help, or an unknown command: argparse prints the choices and exits 2
        return 2
    name, rest = argv[0], argv[1:]
    if name == "train":
        return train(rest)
    from .errors import ConfigError

    try:
        return _command(name, rest)
    except ConfigError as err:  # a user's fault, e.g. a checkout-only command from an installed package
        print(f"error: {err}", file=sys.stderr)
        return 2


def _command(name: str, rest: list[str]) -> int:
    if name in CHECKOUT_ONLY and not {"-h", "--help"} & set(rest):
        from .config import require_checkout

        require_checkout(f"dpgen {name}")
    module = importlib.import_module(COMMANDS[name][0])
    if hasattr(module, "add_arguments") and hasattr(module, "run"):
        sub = argparse.ArgumentParser(prog=f"dpgen {name}", description=COMMANDS[name][1])
        module.add_arguments(sub)
        return int(module.run(sub.parse_args(rest)) or 0)
    from .utils import with_prog

    return int(with_prog(f"dpgen {name}", module.main, rest) or 0)



if __name__ == "__main__":
    raise SystemExit(main())

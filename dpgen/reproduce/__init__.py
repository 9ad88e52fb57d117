"""The papers' tables and figures: the scoreboard (render / collect) and one driver per paper.

``dpgen reproduce NAME [ARGS]``; ``dpgen reproduce NAME --help`` prints the driver's own options.
"""

from __future__ import annotations

import argparse
import importlib

from ..config import require_checkout

# name -> (module, entry function, one line); every entry function takes the remaining argv
DRIVERS: dict[str, tuple[str, str, str]] = {
    "render": ("scoreboard", "main", "render the scoreboard of docs/reproduction from the evidence store (trains nothing)"),
    "collect": ("scoreboard", "main", "add finished run folders to the evidence store"),
    "dpimagebench": ("dpimagebench", "main", "docs/benchmark.md: collect / render / check the DPImageBench cells"),
    "calibration": ("calibration_table", "main", "DP-SWD Table 4: noise calibration for eps = 10"),
    "da": ("da", "main", "DP-SWD Table 1 digits rows and Fig. 3 (domain adaptation)"),
    "da-layout": ("da_layout", "main", "evaluate a saved digits DA model on USPS in both layouts"),
    "dpsinkhorn": ("dpsinkhorn", "main", "DP-Sinkhorn Table 1 rows (MNIST, F-MNIST)"),
    "dpswflow": ("dpswflow", "main", "DPSWflow: Fig. 1 toy, Table 1 (shortened), sigma table"),
    "dpswflow-sigma": ("dpswflow_sigma_table", "_print_markdown", "DPSWflow sigma <-> epsilon pairs"),
    "wdp-fig1": ("wdp_fig1", "_main_no_args", "WDP Figure 1: Laplace / Gaussian budgets under RDP and WDP"),
    "wdp-fig2": ("wdp_fig2", "main", "WDP Figures 2 and 4: composition on synthetic gradients"),
    "wdp-fig3": ("wdp_fig3", "_main_no_args", "WDP Figure 3: effect of beta and delta"),
    "wdp-table2": ("wdp_table2", "main", "WDP Table 2: DP-SGD CNNs on MNIST / Fashion-MNIST"),
    "steps-curve": ("steps_curve", "main", "utility against training steps of one run (resumed segments)"),
    "utility-curves": ("utility_curves", "main", "noise-utility curves of every private generator"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__.splitlines()[0]
    parser.epilog = "drivers:\n" + "\n".join(f"  {k:<15} {v[2]}" for k, v in DRIVERS.items())
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("driver", choices=list(DRIVERS), metavar="NAME", help="what to reproduce (below)")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the driver's own arguments")


def run(args: argparse.Namespace) -> int:
    require_checkout(f"dpgen reproduce {args.driver}")  # the drivers read the evidence store and write docs/
    module, entry, _ = DRIVERS[args.driver]
    argv = list(args.args)
    if args.driver in ("render", "collect"):
        argv = [args.driver, *argv]
    mod = importlib.import_module(f"{__name__}.{module}")
    if entry == "_print_markdown":
        _no_args(args.driver, argv)
        print(mod.markdown())
        return 0
    if entry == "_main_no_args":
        _no_args(args.driver, argv)
        mod.main()
        return 0
    from ..utils import with_prog

    prog = "dpgen reproduce" if args.driver in ("render", "collect") else f"dpgen reproduce {args.driver}"
    return int(with_prog(prog, getattr(mod, entry), argv) or 0)


def _no_args(name: str, argv: list[str]) -> None:
    if argv:
        raise SystemExit(f"error: dpgen reproduce {name} takes no arguments (got {' '.join(argv)})")

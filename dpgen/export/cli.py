"""``dpgen sample <run folder | release file> --n N [--labels ...] [--seed S] --out synth.npz | <folder> | model.pt``.

``--format dpimagebench --out <experiment>/gen/gen.npz`` writes what DPImageBench's ``eval.py`` reads: x float32
in [0, 1] as ``(n, C, H, W)``, y int64 (60,000 images, the default ``--n``, is its protocol's number).

Reads only the weights-only release (never ``checkpoints/``), samples with no private data and no
privacy cost, and writes the export with its own privacy card (``synth.npz`` -> ``synth.card.json`` /
``synth.card.md``; a PNG folder holds ``privacy_card.json`` / ``.md``).  An existing export or card is
replaced only with ``--force``.
"""

from __future__ import annotations

import argparse
import sys

from ..errors import ConfigError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("release", help="a run folder, or its release file (generator.pt, release.pt, ...)")
    parser.add_argument("--n", type=int, default=60000, help="number of samples (default 60000)")
    parser.add_argument("--labels", default="balanced",
                        help="balanced (default) | proportional (released noisy or public class counts) | "
                             "a list of classes, e.g. 0,3,7")
    parser.add_argument("--seed", type=int, default=None, help="sampling seed (default: fresh randomness)")
    parser.add_argument("--out", required=True,
                        help="synth.npz (x in the dataset's pixel format, y), a folder (PNG per class, "
                             "ImageFolder layout), or model.pt (copy the released weights: classifiers); its card is "
                             "written beside it as <name>.card.json / .md (inside a folder)")
    parser.add_argument("--format", default="auto", choices=("auto", "dpimagebench"),
                        help="auto (by --out's name) | dpimagebench: a .npz for the benchmark's eval.py (x float32 in "
                             "[0, 1], (n, C, H, W); y int64)")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing export and its card (a folder only if it holds a previous export)")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .places import check_out, check_suffix, find_release

    try:  # the places first, before torch loads: a wrong one is refused in a second
        find_release(args.release)
        check_suffix(Path(args.out))
        check_out(Path(args.out), args.force)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    from .labels import parse_labels
    from .release import load_release

    try:
        release = load_release(args.release)
        paths = release.export(args.out, args.n, parse_labels(args.labels), args.seed, force=args.force,
                               words=("--out", "--force"), fmt=args.format)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # the disk filled, the place vanished while writing: one line, nothing half-written named
        print(f"error: --out {args.out}: cannot write it ({err.strerror or type(err).__name__}: {err.filename or args.out}); "
              "choose a writable place for --out", file=sys.stderr)
        return 2
    eps = release.card["privacy"]["epsilon"]
    what = "model" if str(args.out).endswith(".pt") else f"{args.n} samples"
    print(f"wrote {paths[0]} ({what}; ε = {eps if isinstance(eps, str) else f'{eps:.4g}'}, "
          f"δ = {release.card['privacy']['delta']:.3g}, {release.card['privacy']['guarantee']})")
    print(f"privacy card: {paths[1]}  {paths[2]}")
    return 0

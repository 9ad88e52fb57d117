"""Summarise a Hydra multirun sweep: one markdown table and one privacy-utility plot.

    python scripts/sweep_report.py multirun/digits_dpswd/2026-11-22_22-06-03
    python scripts/sweep_report.py multirun/... --out reports/ --metric acc_mlp --metric acc_logreg

Every ``results.json`` below the folder (at any depth) is one finished job; its overrides are read
from ``.hydra/overrides.yaml`` beside it. Writes ``sweep_report.md`` and ``privacy_utility.png``
into ``--out`` (default: the multirun folder) and prints the table to stdout.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

import yaml

MISSING = "—"
TIME_SUFFIX = "_time_s"


# ------------------------------------------------------------------------------------ reading
def to_float(value) -> float | None:
    """Number, or one of the strings json_safe writes ("inf", "-inf", "nan"), as a float; else None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _natural_key(text: str) -> list:
    """'10_a' sorts after '2_a' (Hydra job numbers are not zero-padded)."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def _read_overrides(job_dir: Path, results: dict) -> list[str]:
    path = job_dir / ".hydra" / "overrides.yaml"
    if path.is_file():
        loaded = yaml.safe_load(path.read_text()) or []
        return [str(o) for o in loaded]
    return [str(o) for o in results.get("overrides") or []]


def collect(folder: str | Path) -> list[dict]:
    """One row per ``results.json`` below ``folder``, sorted by target ε (non-private last)."""
    folder = Path(folder)
    rows = []
    for path in sorted(folder.rglob("results.json")):
        try:
            results = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as err:
            print(f"warning: skipping unreadable {path}: {err}", file=sys.stderr)
            continue
        job_dir = path.parent
        rel = job_dir.relative_to(folder).as_posix()
        privacy = results.get("privacy") or {}
        rows.append(
            {
                "job": job_dir.name if rel == "." else rel,
                "path": str(job_dir),
                "experiment": results.get("experiment"),
                "overrides": _read_overrides(job_dir, results),
                "target_epsilon": to_float(privacy.get("target_epsilon")),
                "epsilon_rdp": to_float(privacy.get("epsilon_rdp")),
                "epsilon_pld": to_float(privacy.get("epsilon_pld")),
                "delta": to_float(privacy.get("delta")),
                "metrics": dict(results.get("metrics") or {}),
                "runtime_s": to_float(results.get("runtime_s")),
            }
        )
    return sorted(rows, key=lambda r: (*_epsilon_key(r), _natural_key(r["job"])))


def sweep_epsilon(row: dict) -> float:
    """The ε a job is grouped and sorted by: its target, else the RDP ε spent; inf = non-private."""
    for key in ("target_epsilon", "epsilon_rdp"):
        eps = row.get(key)
        if eps is not None and not math.isnan(eps):
            return eps
    return math.inf


def _epsilon_key(row: dict) -> tuple[int, float]:
    eps = sweep_epsilon(row)
    return (1, 0.0) if math.isinf(eps) else (0, eps)


def metric_names(rows: list[dict], wanted: list[str] | None = None) -> list[str]:
    """``wanted`` if given, else every metric seen (first-seen order) except ``*_time_s``."""
    if wanted:
        return list(wanted)
    names: list[str] = []
    for row in rows:
        for name in row["metrics"]:
            if name not in names and not name.endswith(TIME_SUFFIX):
                names.append(name)
    return names


# ------------------------------------------------------------------------------------ table
def fmt(value) -> str:
    """4 significant digits; ∞ for inf; — for missing."""
    if value is None:
        return MISSING
    number = to_float(value)
    if number is None:
        return str(value)
    if math.isinf(number):
        return "∞" if number > 0 else "-∞"
    if math.isnan(number):
        return "nan"
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return f"{number:.4g}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|") or MISSING


def to_markdown(rows: list[dict], metrics: list[str]) -> str:
    header = ["job", "overrides", "target ε", "ε (RDP)", "ε (PLD)", "δ", *metrics, "runtime (s)"]
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" if i < 2 else "---:" for i in range(len(header))) + "|",
    ]
    for row in rows:
        cells = [
            _cell(row["job"]),
            _cell(", ".join(row["overrides"])),
            fmt(row["target_epsilon"]),
            fmt(row["epsilon_rdp"]),
            fmt(row["epsilon_pld"]),
            fmt(row["delta"]),
            *(fmt(row["metrics"].get(name)) for name in metrics),
            fmt(row["runtime_s"]),
        ]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------- plot
def _finite(values) -> list[float]:
    numbers = (to_float(v) for v in values)
    return [v for v in numbers if v is not None and math.isfinite(v)]


def _experiment_title(rows: list[dict]) -> str:
    names = sorted({str(r["experiment"]) for r in rows if r.get("experiment")})
    return ", ".join(names) or "sweep"


def plot(rows: list[dict], metrics: list[str], path: str | Path) -> None:
    """Each metric vs ε spent (RDP), log x; jobs sharing a target ε → mean with min–max bars."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    groups: dict[float, list[dict]] = {}
    for row in rows:
        groups.setdefault(sweep_epsilon(row), []).append(row)
    private = sorted(eps for eps in groups if not math.isinf(eps))
    public = groups.get(math.inf, [])

    fig = Figure(figsize=(7, 4.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    any_points = False
    for i, name in enumerate(metrics):
        color = f"C{i % 10}"
        xs, means, lo, hi = [], [], [], []
        for eps in private:
            values = _finite(r["metrics"].get(name) for r in groups[eps])
            spent = _finite(r["epsilon_rdp"] for r in groups[eps])
            x = sum(spent) / len(spent) if spent else eps
            if not values or x <= 0:
                continue
            mean = sum(values) / len(values)
            xs.append(x)
            means.append(mean)
            lo.append(mean - min(values))
            hi.append(max(values) - mean)
        if xs:
            any_points = True
            ax.errorbar(xs, means, yerr=[lo, hi], fmt="-o", color=color, capsize=3, label=name)
        reference = _finite(r["metrics"].get(name) for r in public)
        if reference:
            ax.axhline(
                sum(reference) / len(reference),
                color=color,
                linestyle="--",
                linewidth=1,
                label=f"{name} (non-private)" if len(metrics) > 1 else "non-private",
            )
    if any_points:
        ax.set_xscale("log")
    ax.set_xlabel("ε spent (RDP)")
    ax.set_ylabel(metrics[0] if len(metrics) == 1 else "metric value")
    ax.set_title(f"{_experiment_title(rows)}: privacy–utility")
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


# -------------------------------------------------------------------------------------- CLI
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="e.g. multirun/<experiment>/<timestamp>")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: FOLDER)")
    parser.add_argument(
        "--metric",
        action="extend",
        nargs="+",
        default=None,
        metavar="NAME",
        help="metric(s) to report (default: all except *_time_s); repeatable",
    )
    args = parser.parse_args(argv)

    if not args.folder.is_dir():
        print(f"error: multirun folder not found: {args.folder}", file=sys.stderr)
        sys.exit(2)
    rows = collect(args.folder)
    if not rows:
        print(
            f"error: no finished jobs were found under {args.folder} (no results.json below it)",
            file=sys.stderr,
        )
        sys.exit(2)

    metrics = metric_names(rows, args.metric)
    for name in metrics:
        if not any(name in r["metrics"] for r in rows):
            print(f"warning: metric {name!r} is in no job's results.json", file=sys.stderr)

    out = args.out or args.folder
    out.mkdir(parents=True, exist_ok=True)
    table = to_markdown(rows, metrics)
    md_path, png_path = out / "sweep_report.md", out / "privacy_utility.png"
    md_path.write_text(f"# {_experiment_title(rows)} — {args.folder}\n\n{table}")
    plot(rows, metrics, png_path)
    print(table, end="")
    print(f"wrote {md_path} and {png_path} ({len(rows)} jobs)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

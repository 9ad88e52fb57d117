"""Summarise a Hydra multirun sweep: a privacy–utility figure and two markdown tables.

    dpgen report multirun/digits_dpswd/2026-11-22_22-06-03
    dpgen report multirun/... --out reports/ --metric acc_mlp --metric acc_logreg

Every ``results.json`` below the folder (at any depth) is one finished job; its overrides are read
from ``.hydra/overrides.yaml`` beside it.  Jobs whose overrides differ only by ``seed`` are one
configuration: its numbers are the mean ± standard deviation over the seeds.

* ``privacy_utility.png``: one panel per metric family (downstream accuracies together, FID alone,
  target accuracy for domain adaptation, sliced Wasserstein distance, ...), x = ε spent under the
  calibrating accountant (the run's ε: PLD by default; log scale) with every target ε marked, error bars = std over seeds; the non-private jobs of the sweep
  (ε = ∞) are drawn as a dashed ceiling.  Provenance (sample counts, extractor, cache path) is never
  plotted.
* ``sweep_report.md``: the results table (overrides, ε under each accountant — the calibrating one
  marked — and the guarantee, utility metrics; run time only for old results.json that still hold
  it: timings depend on private batch sizes and are no longer published), then a provenance table
  per job.

Both are written into ``--out`` (default: the multirun folder); the results table is also printed.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from pathlib import Path

import yaml

from dpgen.logging.summary import guarantee_label, metric_family, to_float  # noqa: E402

MISSING = "—"
TIME_SUFFIX = "_time_s"
CALIBRATING = ("rdp", "pld")  # accountants whose ε is a guarantee; any other epsilon_<name> is reported only
SEED_KEYS = ("seed", "dataset.seed")  # overrides that only change the seed: aggregated over
EPSILON_KEYS = ("accountant.epsilon", "model.private")  # the x axis: a sweep's series differ by these only


# ------------------------------------------------------------------------------------ reading
def _natural_key(text: str) -> list:
    """'10_a' sorts after '2_a' (Hydra job numbers are not zero-padded)."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def _read_overrides(job_dir: Path, results: dict) -> list[str]:
    path = job_dir / ".hydra" / "overrides.yaml"
    if path.is_file():
        loaded = yaml.safe_load(path.read_text()) or []
        return [_normalise(str(o)) for o in loaded]
    return [_normalise(str(o)) for o in results.get("overrides") or []]


def _normalise(override: str) -> str:
    """``trainer.progress=False`` and ``trainer.progress=false`` are one override (Hydra writes both)."""
    key, sep, value = override.partition("=")
    return f"{key}{sep}{value.lower()}" if value.lower() in ("true", "false", "null", "none") else override


def _override_key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def _seed(overrides: list[str], job_dir: Path) -> str:
    for o in overrides:
        if _override_key(o) in SEED_KEYS:
            return o.split("=", 1)[1]
    cfg = job_dir / ".hydra" / "config.yaml"
    if cfg.is_file():
        seed = (yaml.safe_load(cfg.read_text()) or {}).get("seed")
        return MISSING if seed is None else str(seed)
    return MISSING


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
        metrics = dict(results.get("metrics") or {})
        if "eval_error" in metrics:  # training finished, evaluation did not: the job is kept, its metrics partial
            print(f"warning: {job_dir}: evaluation failed ({metrics['eval_error']}); re-evaluate with: "
                  f"dpgen evaluate {job_dir}", file=sys.stderr)
        overrides = _read_overrides(job_dir, results)
        epsilons = {"rdp": to_float(privacy.get("epsilon_rdp")), "pld": to_float(privacy.get("epsilon_pld"))}
        for name in privacy.get("reported_accountants") or {}:
            epsilons[name] = to_float(privacy.get(f"epsilon_{name}"))
        calibrating = privacy.get("calibrating_accountant") or "rdp"  # older files: RDP calibrated
        epsilon = to_float(privacy.get("epsilon", privacy.get(f"epsilon_{calibrating}")))
        rows.append(
            {
                "job": job_dir.name if rel == "." else rel,
                "path": str(job_dir),
                "experiment": results.get("experiment"),
                "overrides": overrides,
                "seed": _seed(overrides, job_dir),
                "target_epsilon": to_float(privacy.get("target_epsilon")),
                "epsilon": epsilon,  # the calibrating accountant's: the run's ε
                "calibrating": calibrating,
                "epsilon_rdp": epsilons["rdp"],
                "epsilon_pld": epsilons["pld"],
                "epsilons": epsilons,
                "delta": to_float(privacy.get("delta")),
                "guarantee": guarantee_label(results),
                "metrics": metrics,
                "provenance": {k: v for k, v in metrics.items()
                               if metric_family(k, v) is None and not k.endswith(TIME_SUFFIX)},
                "runtime_s": to_float(results.get("runtime_s")),
            }
        )
    return sorted(rows, key=lambda r: (*_epsilon_key(r), _natural_key(r["job"])))


def sweep_epsilon(row: dict) -> float:
    """The ε a job is grouped and sorted by: its target, else the ε spent; inf = non-private."""
    for key in ("target_epsilon", "epsilon", "epsilon_rdp"):
        eps = row.get(key)
        if eps is not None and not math.isnan(eps):
            return eps
    return math.inf


def _epsilon_key(row: dict) -> tuple[int, float]:
    eps = sweep_epsilon(row)
    return (1, 0.0) if math.isinf(eps) else (0, eps)


def metric_names(rows: list[dict], wanted: list[str] | None = None) -> list[str]:
    """``wanted`` if given, else every utility metric seen (first-seen order): no provenance, no timings."""
    if wanted:
        return list(wanted)
    names: list[str] = []
    for row in rows:
        for name, value in row["metrics"].items():
            if name not in names and metric_family(name, value) is not None:
                names.append(name)
    return names


def accountant_names(rows: list[dict]) -> list[str]:
    """rdp, pld, then any reported-only accountant seen (first-seen order)."""
    names = list(CALIBRATING)
    for row in rows:
        names += [n for n in row["epsilons"] if n not in names]
    return names


# ------------------------------------------------------------------------------------ seeds
def aggregate(rows: list[dict]) -> list[dict]:
    """Jobs whose overrides differ only by the seed -> one configuration with mean/std of every number.

    Each configuration: ``overrides`` (without the seed), ``jobs``, ``seeds``, ``n``, ``target_epsilon``,
    ``guarantee``, and ``stats[name] = (mean, std, n)`` for ``eps_<accountant>``, every metric and
    ``runtime_s`` (std = sample standard deviation, 0 for one job).
    """
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        key = (row.get("experiment"), tuple(o for o in row["overrides"] if _override_key(o) not in SEED_KEYS))
        groups.setdefault(key, []).append(row)
    configs = []
    for (experiment, overrides), members in groups.items():
        stats: dict[str, tuple[float, float, int]] = {}
        names = {f"eps_{a}" for r in members for a in r["epsilons"]} | {"eps"}
        names |= {m for r in members for m in r["metrics"]} | {"runtime_s"}
        for name in names:
            values = [_value(r, name) for r in members]
            finite = [v for v in values if v is not None and not math.isnan(v)]
            if not finite:
                continue
            if any(math.isinf(v) for v in finite):
                stats[name] = (finite[0] if len(set(finite)) == 1 else math.nan, 0.0, len(finite))
                continue
            std = statistics.stdev(finite) if len(finite) > 1 else 0.0
            stats[name] = (statistics.fmean(finite), std, len(finite))
        configs.append({
            "experiment": experiment,
            "overrides": list(overrides),
            "jobs": [r["job"] for r in members],
            "seeds": [r["seed"] for r in members],
            "n": len(members),
            "target_epsilon": members[0]["target_epsilon"],
            "delta": members[0]["delta"],
            "epsilon": sweep_epsilon(members[0]),
            "calibrating": ", ".join(sorted({r.get("calibrating") or "rdp" for r in members})),
            "guarantee": ", ".join(sorted({r["guarantee"] for r in members})),
            "stats": stats,
        })
    return sorted(configs, key=lambda c: ((1, 0.0) if math.isinf(c["epsilon"]) else (0, c["epsilon"]),
                                          c["overrides"]))


def _value(row: dict, name: str) -> float | None:
    if name == "eps":
        return row.get("epsilon")
    if name.startswith("eps_"):
        return row["epsilons"].get(name[4:])
    if name == "runtime_s":
        return row["runtime_s"]
    return to_float(row["metrics"].get(name))


# ------------------------------------------------------------------------------------ tables
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


def fmt_stat(stat: tuple[float, float, int] | None) -> str:
    """``mean ± std`` over seeds (just the value for one job)."""
    if stat is None:
        return MISSING
    mean, std, n = stat
    return fmt(mean) if n < 2 or math.isinf(mean) else f"{fmt(mean)} ± {std:.2g}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|") or MISSING


def _table(header: list[str], rows: list[list[str]], text_cols: set[int] | None = None) -> str:
    """``text_cols``: left-aligned column indices (default: all); the others are right-aligned numbers."""
    text = set(range(len(header))) if text_cols is None else text_cols
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---" if i in text else "---:" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def common_overrides(configs: list[dict]) -> list[str]:
    """Overrides every configuration shares (shown once above the table, not in every row)."""
    if len(configs) < 2:
        return []
    first = configs[0]["overrides"]
    return [o for o in first if all(o in c["overrides"] for c in configs[1:])]


def to_markdown(configs: list[dict], metrics: list[str], accountants: list[str]) -> str:
    """Results: overrides (those not common to all), seeds, ε per accountant + guarantee, utility, runtime."""
    common = set(common_overrides(configs))
    calibrating = {a for c in configs for a in str(c.get("calibrating", "rdp")).split(", ")}
    timed = any("runtime_s" in c["stats"] for c in configs)  # only old results.json publish a run time

    def label(a: str) -> str:
        if a not in CALIBRATING:
            return f"ε ({a.upper()}, reported only)"
        return f"ε ({a.upper()}{', calibrating' if a in calibrating else ', another accountant'})"

    header = ["overrides", "seeds", "target ε", "δ", *(label(a) for a in accountants),
              "guarantee", *metrics, *(["runtime (s)"] if timed else [])]
    body = []
    for c in configs:
        body.append([
            ", ".join(o for o in c["overrides"] if o not in common) or "(defaults)",
            ", ".join(c["seeds"]) if c["n"] > 1 else c["seeds"][0],
            fmt(c["target_epsilon"]),
            fmt(c["delta"]),
            *(fmt_stat(c["stats"].get(f"eps_{a}")) for a in accountants),
            c["guarantee"],
            *(fmt_stat(c["stats"].get(m)) for m in metrics),
            *([fmt_stat(c["stats"].get("runtime_s"))] if timed else []),
        ])
    return _table(header, body, text_cols={0, 1, header.index("guarantee")})


def provenance_markdown(rows: list[dict]) -> str:
    """One row per job: where the numbers come from (counts, extractor, cache), never plotted."""
    keys: list[str] = []
    for row in rows:
        keys += [k for k in row["provenance"] if k not in keys]
    header = ["job (folder below the sweep)", "seed", *keys]
    body = [[r["job"], r["seed"], *(fmt(r["provenance"].get(k)) for k in keys)] for r in rows]
    return _table(header, body)


# ------------------------------------------------------------------------------------- plot
def families(metrics: list[str]) -> dict[str, list[str]]:
    """Panel title -> its metrics, in first-seen order."""
    out: dict[str, list[str]] = {}
    for name in metrics:
        family = metric_family(name)
        if family is not None:
            out.setdefault(family, []).append(name)
    return out


def _series(configs: list[dict]) -> dict[tuple, list[dict]]:
    """Configurations that differ only by ε (and seed) form one line."""
    out: dict[tuple, list[dict]] = {}
    for c in configs:
        key = (c["experiment"], tuple(o for o in c["overrides"] if _override_key(o) not in EPSILON_KEYS))
        out.setdefault(key, []).append(c)
    return out


def _experiment_title(rows: list[dict]) -> str:
    names = sorted({str(r["experiment"]) for r in rows if r.get("experiment")})
    return ", ".join(names) or "sweep"


def plot(configs: list[dict], metrics: list[str], title: str = "sweep"):
    """The privacy–utility figure (a matplotlib ``Figure``): one panel per metric family."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    panels = families(metrics)
    series = _series(configs)
    many = len(series) > 1
    common = set(common_overrides(configs))
    targets = sorted({c["target_epsilon"] for c in configs
                      if c["target_epsilon"] is not None and math.isfinite(c["target_epsilon"])})
    guarantees = sorted({c["guarantee"] for c in configs if math.isfinite(c["epsilon"])})
    accountants_label = " / ".join(sorted({a.upper() for c in configs if math.isfinite(c["epsilon"])
                                           for a in str(c.get("calibrating", "rdp")).split(", ")})) or "RDP"
    fig = Figure(figsize=(5.2 * max(len(panels), 1), 5.2))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, max(len(panels), 1), squeeze=False)[0]
    for ax, (family, names) in zip(axes, panels.items(), strict=False):
        any_points = False
        color = 0
        for (_, extra), members in series.items():
            shown = [o for o in extra if o not in common]
            suffix = f" [{', '.join(shown) or 'defaults'}]" if many else ""
            for name in names:
                c = f"C{color % 10}"
                color += 1
                pts = []
                for m in members:
                    eps, stat = m["stats"].get("eps"), m["stats"].get(name)
                    x = eps[0] if eps else m["epsilon"]
                    if stat is None or not math.isfinite(x) or x <= 0 or not math.isfinite(stat[0]):
                        continue
                    pts.append((x, stat[0], stat[1], stat[2]))
                pts.sort()
                if pts:
                    any_points = True
                    counts = sorted({p[3] for p in pts})
                    seeds = "" if counts[-1] < 2 else (f" (mean ± std, {counts[0]} seeds)" if len(counts) == 1 else
                                                       f" (mean ± std, {counts[0]}–{counts[-1]} seeds)")
                    ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts], fmt="-o",
                                color=c, capsize=3, label=name + suffix + seeds)
                ceiling = [m["stats"][name] for m in members if math.isinf(m["epsilon"]) and name in m["stats"]]
                if ceiling:
                    ax.axhline(ceiling[0][0], color=c, linestyle="--", linewidth=1.2,
                               label=f"{name}{suffix}, non-private ceiling (ε = ∞)")
        for t in targets:
            ax.axvline(t, color="0.4", linestyle=":", linewidth=1)
        for m in configs:  # a job that stopped early (trainer.max_steps) spent far less than its target
            eps, t = m["stats"].get("eps"), m["target_epsilon"]
            if eps and t and math.isfinite(eps[0]) and 0 < eps[0] < 0.9 * t:
                ax.annotate(f"target ε {fmt(t)}", (eps[0], 0.02), xycoords=("data", "axes fraction"), rotation=90,
                            fontsize=7, color="0.35", ha="right", va="bottom")
        if targets:
            ax.plot([], [], color="0.4", linestyle=":", label="target ε " + ", ".join(fmt(t) for t in targets))
        if any_points:
            ax.set_xscale("log")
        ax.set_xlabel(f"ε spent ({accountants_label}, calibrating" + (f"; {', '.join(guarantees)}" if guarantees else "")
                      + ")")
        ax.set_ylabel(family + (" (lower is better)" if family in ("FID", "sliced Wasserstein") else ""))
        ax.set_title(family)
        if family in ("accuracy", "target accuracy (DA)"):
            ax.set_ylim(bottom=0.0)  # accuracies live in [0, 1]; a wide std bar must not suggest otherwise
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # below the panel: never over a line
            ax.legend(fontsize="x-small", loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    fig.suptitle(f"{title}: privacy–utility")
    fig.tight_layout()
    return fig


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
        help="utility metric(s) to report (default: all; provenance and *_time_s are never metrics); repeatable",
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
        elif metric_family(name) is None:
            print(f"warning: {name!r} is provenance, not a utility metric: tabled, not plotted", file=sys.stderr)

    out = args.out or args.folder
    out.mkdir(parents=True, exist_ok=True)
    configs = aggregate(rows)
    table = to_markdown(configs, metrics, accountant_names(rows))
    common = common_overrides(configs)
    title = _experiment_title(rows)
    md_path, png_path = out / "sweep_report.md", out / "privacy_utility.png"
    md_path.write_text(
        f"# {title} — {args.folder}\n\n![privacy–utility](privacy_utility.png)\n\n"
        f"## Results ({len(rows)} jobs, {len(configs)} configurations; mean ± std over seeds)\n\n"
        + (f"Overrides common to every job: `{' '.join(common)}`\n\n" if common else "")
        + f"{table}\n"
        "ε (RDP) and ε (PLD) are guarantees when the guarantee column says rigorous; reported-only "
        "accountants are not.\n\n"
        f"## Provenance (per job; not plotted)\n\n{provenance_markdown(rows)}"
    )
    plot(configs, metrics, title).savefig(png_path, dpi=120)
    if common:
        print(f"overrides common to every job: {' '.join(common)}")
    print(table, end="")
    print(f"wrote {md_path} and {png_path} ({len(rows)} jobs, {len(configs)} configurations)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

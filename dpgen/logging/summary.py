"""The run summary, grouped as privacy | utility | provenance (console table, results.json, W&B).

``results.json`` keeps its flat keys (``metrics``, ``privacy``, ``train``, ``overrides`` ...: scripts
and tests read them); :func:`group_results` adds a ``summary`` view with three groups:

* **privacy** — the guarantee label, ε spent (``epsilon``: the calibrating accountant's, the run's
  guarantee; the other accountant's and any reported-only accountant's labelled as such), δ, the
  target ε (private runs only), steps, sampling, and the mechanism's public noise constants;
* **utility** — the metrics a user came for (downstream / test / target accuracy, FID, sliced
  Wasserstein distance ...): every numeric metric that is not provenance;
* **provenance** — how the numbers were produced: counts, extractor, cache paths, overrides, device
  (no wall-clock timings: they depend on the private batch sizes and stay in
  ``private_timings.json``, see ``dpgen.logging.timings``).  Never plotted (``dpgen/report.py`` lists them in a second table).

The guarantee label is the run's own statement: ``results["privacy"]["guarantee"]`` if the
ledger wrote one, else the ``guarantee`` field the method reports in its train metrics, mapped to
one of :data:`LABELS`.
"""

from __future__ import annotations

import math
import re
from typing import Any

from ..privacy.guarantee import CLT, DATA_DEPENDENT, NON_PRIVATE, PAPER_CONVENTION, RIGOROUS

LABELS = {"rigorous": RIGOROUS, "clt": CLT, "paper": PAPER_CONVENTION, "data_dependent": DATA_DEPENDENT,
          "none": NON_PRIVATE}  # one spelling

# metrics that describe how a number was produced rather than how good the model is
_PROVENANCE = re.compile(r"(_time_s$|^n_|_n_|^fid_(extractor|reference|n_)|_cache|_seed$|_note$)")
# mechanism constants reported by methods in their train metrics: privacy group
_MECHANISM_KEYS = ("noise_multiplier", "noise_std", "noise_std_on_sum", "sensitivity", "sensitivity_bound",
                   "clip_norm", "delta_split")


# privacy.convention=paper (dpgen/privacy/conventions.py): what the paper states and what the run really has
_CONVENTION_KEYS = ("convention", "paper_epsilon", "paper_sigma", "sensitivity_stated", "sensitivity_true",
                    "noise_multiplier_true", "epsilon_true", "epsilon_true_accountant", "epsilon_true_note",
                    "epsilon_worst_case_rows")


def to_float(value) -> float | None:
    """A number (or json_safe's "inf"/"nan" strings) as a float; anything else None."""
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


def metric_family(name: str, value: Any = 0.0) -> str | None:
    """The panel a utility metric belongs to, or None for provenance (counts, names, timings, paths).

    ``acc_target*`` / ``acc_source`` -> "target accuracy (DA)"; other ``acc_*`` / ``*accuracy`` ->
    "accuracy"; ``fid`` -> "FID"; ``swd*`` -> "sliced Wasserstein"; any other numeric metric is
    its own family (named by the metric).
    """
    if to_float(value) is None or _PROVENANCE.search(name):
        return None
    if name.startswith(("acc_target", "acc_source")):
        return "target accuracy (DA)"
    if name.startswith("acc_") or name.endswith("accuracy"):
        return "accuracy"
    if name == "fid" or name.startswith("fid"):
        return "FID"
    if name.startswith("swd") or "sliced" in name:
        return "sliced Wasserstein"
    return name


def guarantee_label(results: dict) -> str:
    """One of :data:`LABELS` (or the run's own wording when it matches none of them)."""
    privacy = results.get("privacy") or {}
    raw = privacy.get("guarantee") or (results.get("train") or {}).get("guarantee")
    eps = to_float(privacy.get("epsilon", privacy.get("epsilon_rdp")))  # epsilon_rdp: files written before `epsilon`
    if raw is None:
        if privacy.get("target_epsilon") is None and (eps is None or math.isinf(eps)):
            return LABELS["none"]
        return "not stated by the method"
    text = str(raw).lower()
    if "data-dependent" in text or privacy.get("data_dependent_reports"):
        return LABELS["data_dependent"]
    if "non-private" in text or "nonprivate" in text or text.startswith("none"):
        return LABELS["none"]
    if "paper" in text or "convention" in text:
        return LABELS["paper"]
    if "clt" in text or "not rigorous" in text or "asymptotic" in text:
        return LABELS["clt"]
    if text.startswith("rigorous"):
        return LABELS["rigorous"]
    return str(raw)


def group_results(results: dict) -> dict:
    """``{"privacy": {...}, "utility": {...}, "provenance": {...}}`` from a flat results dict."""
    privacy_in = results.get("privacy") or {}
    train = results.get("train") or {}
    metrics = results.get("metrics") or {}
    label = guarantee_label(results)
    privacy: dict = {"guarantee": label}
    if privacy_in.get("status"):  # e.g. "not DP: data-dependent reports"
        privacy["status"] = privacy_in["status"]
    for key in ("epsilon", "calibrating_accountant", "epsilon_rdp", "epsilon_pld"):
        if key in privacy_in:
            privacy[key] = privacy_in[key]
    for name in privacy_in.get("reported_accountants") or {}:
        privacy[f"epsilon_{name}_reported_only"] = privacy_in.get(f"epsilon_{name}")  # not a guarantee
    for key in ("delta", "delta_reserved_for_sensitivity", "private_steps", "sampling", "neighbouring_relation"):
        if privacy_in.get(key) is not None:
            privacy[key] = privacy_in[key]
    if privacy_in.get("target_epsilon") is not None:
        privacy["target_epsilon"] = privacy_in["target_epsilon"]
    if privacy_in.get("by_mechanism"):  # several mechanisms (a warm start's two phases): each one's ε alone
        privacy["by_mechanism"] = privacy_in["by_mechanism"]
    for key in _CONVENTION_KEYS:  # privacy.convention=paper: the stated vs the true sensitivity (privacy.conventions)
        if privacy_in.get(key) is not None:
            privacy[key] = privacy_in[key]
    for key in _MECHANISM_KEYS:
        if train.get(key) is not None:
            privacy[key] = train[key]

    utility = {k: v for k, v in metrics.items() if metric_family(k, v) is not None}
    provenance: dict = {k: results[k] for k in ("experiment", "dataset", "n_private", "device") if k in results}
    provenance.update({k: v for k, v in metrics.items() if k not in utility})
    provenance.update({f"train_{k}" if not k.startswith("train") else k: v for k, v in train.items()
                       if k not in _MECHANISM_KEYS and k != "guarantee"})
    if "overrides" in results:
        provenance["overrides"] = results["overrides"]
    return {"privacy": privacy, "utility": utility, "provenance": provenance}


# ------------------------------------------------------------------------------------ console
def fmt(value) -> str:
    """4 significant digits; ∞ for inf; — for missing; lists joined."""
    if value is None:
        return "—"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value) or "—"
    if isinstance(value, bool) or isinstance(value, int):
        return str(value)
    number = to_float(value)
    if number is None:
        return str(value)
    if math.isinf(number):
        return "∞" if number > 0 else "-∞"
    if number != 0 and abs(number) < 1e-3:
        return f"{number:.3g}"
    return f"{number:.4f}"


def summary_rows(results: dict) -> list[tuple[str, str, str]]:
    """(group, quantity, value) rows of the console table; ε carries its guarantee label."""
    grouped = results.get("summary") or group_results(results)
    p, raw = grouped["privacy"], results.get("privacy") or {}
    label = p["guarantee"]
    non_private = label == LABELS["none"]
    rows = [("privacy", "guarantee", label)]
    if p.get("status"):
        rows.append(("privacy", "status", f"{p['status']}: the run folder publishes un-noised functions of "
                     "private records and is not covered by its epsilon"))
    calibrating = None if non_private else (p.get("calibrating_accountant") or "rdp")
    if calibrating is None:
        rows.append(("privacy", "epsilon spent", f"{fmt(p.get('epsilon', p.get('epsilon_rdp')))}  ({label})"))
        if p.get("noise_std") is not None:
            rows.append(("privacy", "noise std (no privacy accounting)", fmt(p["noise_std"])))
    else:  # the ε of the run: the calibrating accountant's; the other one once, labelled as such
        rows.append(("privacy", f"epsilon spent ({calibrating.upper()}: calibrates and stops)",
                     f"{fmt(p.get('epsilon', p.get(f'epsilon_{calibrating}')))}  ({label})"))
        other = "pld" if calibrating == "rdp" else "rdp"
        value = p.get(f"epsilon_{other}")
        rows.append(("privacy", f"epsilon ({other.upper()}, another accountant)",
                     f"{fmt(value)}  (same releases; not the run's ε)" if value is not None else
                     "n/a (" + (raw.get(f"epsilon_{other}_note") or "no PLD for this sampling") + ")"))
        for key, value in p.items():
            if key.endswith("_reported_only"):
                name = key.removeprefix("epsilon_").removesuffix("_reported_only").upper()
                rows.append(("privacy", f"epsilon ({name}, reported only)", f"{fmt(value)}  (not a DP guarantee)"))
        rows.append(("privacy", "target epsilon", fmt(p.get("target_epsilon"))))
        if p.get("convention") == "paper":
            rows.append(("privacy", "epsilon stated by the paper", fmt(p.get("paper_epsilon"))))
            true = to_float(p.get("epsilon_true"))
            note = p.get("epsilon_true_note") or ""
            acct = str(p.get("epsilon_true_accountant") or "").upper()
            rows.append(("privacy", "epsilon under the data's true sensitivity" + (f" ({acct})" if acct else ""),
                         note if true is not None and math.isinf(true) and note.startswith("∞")
                         else f"{fmt(true)}  ({note})"))
            if p.get("epsilon_worst_case_rows") is not None:
                rows.append(("privacy", "epsilon of the projections alone, all rows moving",
                             f"{fmt(p['epsilon_worst_case_rows'])}  (does not cover the un-noised scale)"))
        rows.append(("privacy", "delta", fmt(p.get("delta"))))
        for key in ("private_steps", "sampling", "neighbouring_relation", "noise_multiplier", "sensitivity_bound"):
            if key in p:
                rows.append(("privacy", key.replace("_", " "), fmt(p[key])))
        rows += mechanism_rows(p.get("by_mechanism") or [], warm="warm_start" in (results.get("train") or {}),
                               accountant=calibrating)
    prov = grouped["provenance"]
    for key, value in grouped["utility"].items():  # every FID with the size of its reference set and its floor
        if key == "fid_real_vs_real" and "fid" in grouped["utility"]:
            continue  # shown on the FID's own row
        notes = []
        if key == "fid" and prov.get("fid_n_reference") is not None:
            notes.append(f"on {prov['fid_n_reference']} reference images")
        if key == "fid" and grouped["utility"].get("fid_real_vs_real") is not None:
            sizes = str(prov.get("fid_real_vs_real_sizes", "")).split(" reference")[0]
            notes.append(f"real-vs-real floor {fmt(grouped['utility']['fid_real_vs_real'])} at {sizes}")
        if key == "fid" and prov.get("fid_floor_note"):  # no usable floor, or the FID at or below it
            notes.append(f"WARNING: {prov['fid_floor_note']}")
        if metric_family(key, value) == "accuracy" and prov.get(f"{key}_note"):  # at or below chance / the prior
            notes.append(f"WARNING: {prov[f'{key}_note']}")
        rows.append(("utility", key, fmt(value) + (f"  ({'; '.join(notes)})" if notes else "")))
    shown = ("experiment", "dataset", "n_private", "device")
    for key in shown:
        if key in prov:
            rows.append(("provenance", key, fmt(prov[key])))
    for key, value in prov.items():  # the evaluator's counts, extractor, reference set, cache
        if key not in shown and (key.startswith("fid_") or key.startswith("n_")):
            rows.append(("provenance", key, fmt(value)))
    if results.get("runtime_s") is not None:  # a run's own summary: its timings are private, kept in a file only
        rows.append(("provenance", "wall-clock timings", "private: private_timings.json in the run folder (not shown)"))
    return rows


def mechanism_rows(by_mechanism: list[dict], warm: bool, accountant: str) -> list[tuple[str, str, str]]:
    """One row per mechanism of a run with several (``privacy.by_mechanism``): its releases' ε alone, its noise
    multiplier; a warm-started run's rows are its phases (1: the moment release, 2: the method's own)."""
    rows = []
    for i, row in enumerate(by_mechanism, start=1):
        what = f"phase {i}{' (warm start)' if i == 1 else ''}: {row['mechanism']}" if warm else row["mechanism"]
        n = int(row.get("releases") or 0)
        rows.append(("privacy", what, f"ε {fmt(row.get('epsilon'))} alone ({accountant.upper()}), noise multiplier "
                     f"{fmt(row.get('noise_multiplier'))}, {n} release{'s' if n != 1 else ''}"))
    return rows


def print_summary(results: dict, console=None) -> None:
    """The grouped results table on stdout (plus the notes of reported-only accountants)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = console or Console()
    overrides = [o for o in results.get("overrides") or [] if not o.startswith(("experiment=", "hydra."))]
    title = f"{results.get('experiment', 'run')} — results" + (f" ({', '.join(overrides)})" if overrides else "")
    table = Table(title=Text(title), show_header=True)  # a sweep's jobs: one title each; no markup: `=[logreg]` stays
    table.add_column("group")
    table.add_column("quantity")
    table.add_column("value")
    previous = None
    for group, quantity, value in summary_rows(results):
        if previous is not None and group != previous:
            table.add_section()
        table.add_row(group if group != previous else "", Text(quantity), Text(value))  # no markup
        previous = group
    console.print(table)
    p = results.get("privacy") or {}
    for name, note in (p.get("reported_accountants") or {}).items():
        console.print(f"  {name.upper()}: {note}")
    if p.get("reported_accountants_note"):
        console.print(f"  {p['reported_accountants_note']}")

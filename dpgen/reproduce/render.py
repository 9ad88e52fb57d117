"""The markdown of docs/reproduction/: one page per paper and the verdict summary of its index, from the evidence.

Everything here is a function of the registry and the evidence store, so a fresh clone regenerates
the pages byte for byte; the verdict rules are in ``dpgen/reproduce/scoreboard.py`` (module docstring).
"""

from __future__ import annotations

import fnmatch
import math
import statistics
import textwrap
from pathlib import Path

from ..paths import ROOT
from .evidence import evidence_name, group_runs, matching_cells, stored_number
from .markers import between, replace_between, wrapped_command
from .registry import (
    CELLS,
    HEADERS,
    PAGE_TITLES,
    PAGES,
    REGISTRY,
    TABLES,
    VERDICTS,
    Cell,
    Metric,
    Row,
    Table,
    page_registry,
    validate_registry,
)
from .store import STORE, effective_overrides, load_store, override_key

DOCS = ROOT / "docs" / "reproduction"
START, END = "<!-- scoreboard:start -->", "<!-- scoreboard:end -->"
WIDTH = 110  # characters of a generated line of prose (a doc line stays under 300)


# ----------------------------------------------------------------------------------- verdict
def comparable(metric: Metric, ev: dict) -> bool:
    m = ev.get("metrics") or {}
    return all(str(m.get(k)) == v for k, v in metric.requires)


def cell_value(metric: Metric, runs: list[dict]) -> tuple[float, float, int] | None:
    """(mean, std, n) over the runs (seeds) of ``metric`` in the paper's unit; None when no run has it."""
    vals = [x * metric.scale for x in (stored_number((e.get("metrics") or {}).get(metric.key)) for e in runs) if x is not None]
    if not vals:
        return None
    return statistics.fmean(vals), (statistics.stdev(vals) if len(vals) > 1 else 0.0), len(vals)


def within_tolerance(row: Row, runs: list[dict]) -> bool | None:
    """True/False over the comparable metrics of ``runs`` (one group); None when none is comparable."""
    judged = []
    for m in row.metrics:
        comp = [e for e in runs if comparable(m, e)]
        v = cell_value(m, comp)
        if v is not None:
            judged.append(m.within(v[0]))
    return all(judged) if judged else None


def verdict(row: Row, evidence: list[dict]) -> tuple[str, str]:
    """(status, detail): status is "reproduced (within tolerance)", "explained by measurement" or "open".

    The honest cell never decides (the rule: the paper's setting, or non-private for a
    non-private number), but an honest run within the tolerance is named in the detail.
    """
    status, detail = _verdict(row, evidence)
    if status != "reproduced (within tolerance)" and isinstance(row.honest, Cell) and "honest" not in _decisive(row):
        hits = [g for g in group_runs(row.honest, evidence) if within_tolerance(row, g)]
        if hits:
            detail += f"; the honest run is within the tolerance ({_values(row, hits[0])}, " \
                      f"{(hits[0][0].get('privacy') or {}).get('guarantee', '—')})"
    return status, detail


def _decisive(row: Row) -> list[str]:
    """The cells whose runs decide the verdict (module docstring)."""
    names = [n for n in ["paper"] + ([] if row.paper_private else ["nonprivate"]) if isinstance(getattr(row, n), Cell)]
    if row.paper_private and not names and isinstance(row.honest, Cell):
        names = ["honest"]  # no paper recipe implemented: a rigorous run at the paper's ε decides
    return names


def _ratio_groups(row: Row, runs: list[dict], evidence: list[dict]) -> tuple[float, list[dict]] | None:
    """(our FID ratio, the reference runs) for one group of the decisive cell, or None without a paired reference."""
    r = row.ratio
    m = row.metrics[0]
    key = sorted(o for o in effective_overrides(runs[0]) if any(fnmatch.fnmatch(override_key(o), p) for p in r.pair))
    for ref in group_runs(r.ref, evidence):
        if sorted(o for o in effective_overrides(ref[0]) if any(fnmatch.fnmatch(override_key(o), p) for p in r.pair)) != key:
            continue
        num, den = cell_value(m, runs), cell_value(m, ref)
        if num is not None and den is not None and den[0] > 0:
            return num[0] / den[0], ref
    return None


def _ratio_verdict(row: Row, name: str, evidence: list[dict]) -> tuple[bool, str] | None:
    """(within, detail) of cell ``name`` judged by ratio: the first group with a paired reference that is within
    the tolerance, else the first group with a paired reference; None when no group has one."""
    m, r = row.metrics[0], row.ratio
    first = None
    for g in group_runs(getattr(row, name), evidence):
        got = _ratio_groups(row, g, evidence)
        if got is None:
            continue
        ours, ref = got
        paper, bound = m.paper / r.paper_ref, (m.paper + m.tolerance) / r.paper_ref
        # how the FIDs were taken when not the evaluator's default (e.g. the 25-image FID a released code scores)
        how = [f"`{o}`" for o in effective_overrides(g[0]) if override_key(o).startswith("evaluator.fid.")]
        detail = (f"judged as a domain-FID ratio (these runs took the offline domain extractor, not Inception"
                  f"{', FIDs with ' + ' '.join(how) + ' on both sides' if how else ''}): {HEADERS[name]} "
                  f"{_values(row, g).replace(' (not comparable†)', '')} / {r.ref_label} (ours) "
                  f"{_values(row, ref).replace(' (not comparable†)', '')} = {ours:.2f}, paper {m.paper:g} / "
                  f"{r.paper_ref:g} = {paper:.2f} (the +{m.tolerance:g} tolerance allows ≤ {bound:.2f}) "
                  f"({(g[0].get('privacy') or {}).get('guarantee', '—')})")
        if ours <= bound:
            return True, detail
        first = first or (False, detail)
    return first


def _verdict(row: Row, evidence: list[dict]) -> tuple[str, str]:
    decisive = _decisive(row)
    ran = judged = False
    ratio_detail = None
    for name in decisive:
        cell = getattr(row, name)
        for g in group_runs(cell, evidence):
            ran = True
            ok = within_tolerance(row, g)
            judged = judged or ok is not None
            if ok:
                label = (g[0].get("privacy") or {}).get("guarantee", "—")
                how = " — no paper recipe implemented, a rigorous run at the paper's ε" if name == "honest" else ""
                return "reproduced (within tolerance)", f"{HEADERS[name]}: {_values(row, g)} ({label}){how}"
        if row.ratio is not None and not judged:
            rv = _ratio_verdict(row, name, evidence)
            if rv is not None:
                if rv[0]:
                    return "reproduced (within tolerance)", rv[1]
                ratio_detail = ratio_detail or rv[1]
    if row.explained is not None:
        return "explained by measurement", f"{row.explained.text} (`{row.explained.command}`)"
    if ratio_detail is not None:
        return "open", "outside the tolerance, " + ratio_detail
    if not decisive:
        return "open", "no run of the paper's setting is defined (see the cell)"
    if not ran:
        return "open", "not run: " + " / ".join(HEADERS[n] for n in decisive)
    if not judged:
        why = "; ".join(sorted({m.not_comparable for m in row.metrics if m.not_comparable})) or "metric not measured"
        if row.ratio is not None:
            why += f"; no paired run of the ratio's reference ({row.ratio.ref_label}: `{row.ratio.ref.command()}`)"
        return "open", f"no comparable measurement ({why})"
    return "open", "outside the tolerance"


# ----------------------------------------------------------------------------------- render
def _fmt(x: float | None, nd: int = 1) -> str:
    if x is None:
        return "—"
    if math.isinf(x):
        return "∞"
    return f"{x:,.{nd}f}"


def _values(row: Row, runs: list[dict]) -> str:
    parts = []
    for m in row.metrics:
        comp = all(comparable(m, e) for e in runs)
        v = cell_value(m, runs)
        if v is None:
            parts.append(f"{m.label} not measured")
            continue
        txt = _fmt(v[0]) + (f" ± {_fmt(v[1])}" if v[2] > 1 else "")
        parts.append(txt + ("" if comp else " (not comparable†)"))
    return " / ".join(parts)


def _privacy(ev: dict) -> str:
    p, mech = ev.get("privacy") or {}, ev.get("mechanism") or {}
    label = p.get("guarantee", "—")
    if label == "non-private":
        return "non-private"
    eps = [f"{_fmt(stored_number(p.get(k)), 2)} ({name})" for k, name in (("epsilon_rdp", "RDP"), ("epsilon_pld", "PLD"))
           if stored_number(p.get(k)) is not None]
    # further epsilons the run states (e.g. a paper-convention run's epsilon_true under its data's real
    # sensitivity); their per-accountant copies (epsilon_true_rdp / _pld) are left to the evidence file
    eps += [f"{_fmt(stored_number(v), 2)} ({k.removeprefix('epsilon_').replace('_', ' ')})" for k, v in sorted(p.items())
            if k.startswith("epsilon_") and k not in ("epsilon_rdp", "epsilon_pld") and stored_number(v) is not None
            and not (k.endswith(("_rdp", "_pld")) and k[:-4] in p)]
    out = f"ε = {' / '.join(eps) or '—'}, {label}"
    if p.get("status"):
        out += f", {p['status']}"
    if stored_number(mech.get("noise_multiplier")) is not None:
        out += f", σ mult. {_fmt(stored_number(mech['noise_multiplier']), 3)}"
    elif stored_number(mech.get("noise_std")) is not None:
        out += f", noise std {_fmt(stored_number(mech['noise_std']), 3)}"
    return out


def _wrapped(text: str, first: str = "", rest: str = "  ") -> list[str]:
    """``text`` as markdown lines of at most ``WIDTH`` characters (a code span may break across lines)."""
    return textwrap.wrap(text, WIDTH, initial_indent=first, subsequent_indent=rest, break_long_words=False,
                         break_on_hyphens=False)


def _cell_short(row: Row, name: str, evidence: list[dict]) -> str:
    """What the table shows of a cell on its one line: each group's number(s), or "not run" / the cell's text."""
    cell = getattr(row, name)
    if not isinstance(cell, Cell):
        return cell if len(cell) <= 70 else "see below"
    groups = group_runs(cell, evidence)
    if not groups:
        return "not run"
    values = " / ".join("—" if v.endswith(" not measured") else v.replace(" (not comparable†)", "†")
                        for v in _values(row, groups[0]).split(" / "))
    first = f"**{values}** ({len(groups[0])} run{'s' if len(groups[0]) > 1 else ''})"
    return first + (f"; {len(groups) - 1} more below" if len(groups) > 1 else "")


def _cell_text(row: Row, name: str, evidence: list[dict], refs: dict[str, str]) -> list[str]:
    """The cell in full, one entry per group of runs: number(s), guarantee and ε, steps, seeds, run time, run ids."""
    cell = getattr(row, name)
    if not isinstance(cell, Cell):
        return [cell]
    groups = group_runs(cell, evidence)
    if not groups:
        return [f"not run (`{cell.command()}`)"]
    lines = []
    for g in groups:
        ids = ", ".join(refs[evidence_name(e)] for e in g)
        extra = [o for o in effective_overrides(g[0]) if o not in cell.overrides]
        seeds = ", ".join(str(e.get("seed", 0)) for e in g)
        steps = g[0].get("steps")
        rt = " + ".join(f"{_fmt(stored_number(e.get('runtime_s')), 0)} s" for e in g)
        runs = "one run, seed" if len(g) == 1 else f"{len(g)} runs, seeds"
        lines.append(f"**{_values(row, g)}** — {_privacy(g[0])}; {f'{steps:,} steps; ' if steps else ''}"
                     f"{runs} {seeds}; {rt}" + (f"; with {' '.join(f'`{o}`' for o in extra)}" if extra else "")
                     + f" [{ids}]")
    return lines


def render_tables(evidence: list[dict], registry: tuple[Row, ...] = REGISTRY,
                  tables: tuple[Table, ...] = TABLES) -> str:
    """The markdown between the scoreboard markers (deterministic: depends on the evidence only). Each table row
    is one short line; the cells in full and the verdicts' reasons are listed under the table, the runs'
    commands in a code block after them."""
    validate_registry(registry, tables)
    names = sorted({evidence_name(e) for e in evidence if matching_cells(e, registry)})
    refs = {n: f"r{i + 1}" for i, n in enumerate(names)}
    by_name = {evidence_name(e): e for e in evidence}
    out = ["", *_wrapped(
        "Generated by `make reproduce` (`dpgen reproduce render`) from the evidence store `evidence/` — nothing "
        "is re-run. Add a finished run folder with `dpgen reproduce collect <run folder>...`. Each cell: our "
        "number(s) in the paper's unit (mean ± std when a cell has several runs; \"one run\" otherwise); under "
        "the table, each cell in full: the run's guarantee and ε, steps, seeds, run time, and the run ids [rN] "
        "whose commands are listed after it; \"not run\" gives the command that defines the cell. Verdicts are "
        "computed (`dpgen/reproduce/scoreboard.py`, docstring): a non-private run never counts for a private "
        "number. † not comparable with the paper (e.g. domain-extractor FID vs Inception FID); the domain-extractor "
        "FIDs stored here were measured with the extractor of their time (its network depended on the device and "
        "random state it was trained in; no real-vs-real floor) and are not re-measured.", rest=""), ""]
    statuses = [verdict(r, evidence)[0] for r in registry]
    out += ["Verdicts over the rows below: " + ", ".join(
        f"{statuses.count(v)} {v}" for v in VERDICTS)
        + f" (of {len(statuses)}).", ""]
    for t in tables:
        rows = [r for r in registry if r.table == t.id]
        out += [f"### {t.title}", "", *_wrapped(t.note, rest=""), "",
                "| row | paper | " + " | ".join(HEADERS[c] for c in CELLS) + " | verdict |",
                "|---|---|---|---|---|---|"]
        used: list[str] = []
        details: list[str] = []
        for r in rows:
            paper = " / ".join(m.text or f"{m.paper:g}" for m in r.metrics)
            for c in CELLS:
                cell = getattr(r, c)
                if isinstance(cell, Cell):
                    used += [evidence_name(e) for g in group_runs(cell, evidence) for e in g]
            status, detail = verdict(r, evidence)
            out.append(f"| {r.name} | {paper} ({r.source}) | "
                       + " | ".join(_cell_short(r, c, evidence) for c in CELLS) + f" | **{status}** |")
            details += _wrapped(f"**{r.name}** — **{status}**: {detail}", first="* ")
            for c in CELLS:
                for text in _cell_text(r, c, evidence, refs):
                    details += _wrapped(f"{HEADERS[c]}: {text}", first="  * ", rest="    ")
        out += ["", "The rows in full:", "", *details, ""]
        seen = sorted(set(used), key=lambda n: int(refs[n][1:]))
        if seen:
            out += ["Runs:", "", "```bash"]
            for n in seen:
                e = by_name[n]
                out.append(f"# {refs[n]}: {_fmt(stored_number(e.get('runtime_s')), 0)} s, {e.get('date_utc')}, "
                           f"commit {e.get('git_commit')}; evidence/{n}")
                out.append(wrapped_command(e["command"]))
            out += ["```", ""]
    return "\n".join(out)


def render_page(slug: str, evidence: list[dict], registry: tuple[Row, ...] = REGISTRY) -> str:
    """The generated block of ``docs/reproduction/<slug>.md``: that paper's tables, run ids local to the page."""
    return render_tables(evidence, page_registry(slug, registry), tuple(t for t in TABLES if t.id in PAGES[slug]))


def render_summary(evidence: list[dict], registry: tuple[Row, ...] = REGISTRY) -> str:
    """The generated block of ``docs/reproduction/index.md``: verdict counts per paper."""
    out = ["", "| paper | page | rows | reproduced (within tolerance) | explained by measurement | open |",
           "|---|---|---|---|---|---|"]
    for slug, title in PAGE_TITLES.items():
        statuses = [verdict(r, evidence)[0] for r in page_registry(slug, registry)]
        out.append(f"| {title} | [{slug}]({slug}.md) | {len(statuses)} | "
                   + " | ".join(str(statuses.count(v)) for v in VERDICTS) + " |")
    return "\n".join(out) + "\n"


def rendered_pages(evidence: list[dict], docs: Path = DOCS) -> dict[Path, str]:
    """Every generated block, keyed by the page it belongs in."""
    pages = {docs / f"{slug}.md": render_page(slug, evidence) for slug in PAGES}
    pages[docs / "index.md"] = render_summary(evidence)
    return pages


def render(docs: Path = DOCS, store: Path = STORE) -> list[Path]:
    """Rewrite the scoreboard block of every reproduction page; returns the pages that changed."""
    changed = []
    for page, block in rendered_pages(load_store(store), docs).items():
        old = page.read_text()
        new = replace_between(old, START, END, block, page=page)
        if new != old:
            page.write_text(new)
            changed.append(page)
    return changed


def stale_pages(docs: Path = DOCS, store: Path = STORE) -> list[Path]:
    """The reproduction pages whose scoreboard block differs from a render of the store."""
    return [page for page, block in rendered_pages(load_store(store), docs).items()
            if between(page.read_text(), START, END) != block]


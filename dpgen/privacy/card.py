"""The privacy card: what a release (or an export sampled from it) guarantees, in JSON and in plain words.

``build_card(ledger, ...)`` reads everything privacy-related from the ledger that ran (its entries,
its epsilon under every accountant, its relation and sampling), so the card cannot disagree with
the accounting; ``card_markdown`` renders it for a person; ``write_card`` writes both files:
``privacy_card.json`` / ``.md`` beside a run's release, ``<export>.card.json`` / ``.md`` beside an
export file (``card_paths``), ``privacy_card.json`` / ``.md`` inside a folder export.

The size of the private set.  Under the add/remove relation the number N of private records is
itself protected (a neighbouring dataset has N ± 1 records), so an exact N never appears in a card,
a release or results.json (``dataset_size``): the card shows only a NOISY count when the method
released one through its calibrated, ledger-recorded mechanism (e.g. the sum of the DP
class-Gaussian's noisy class counts).  Under replace-one (``accountant.sampling=without_replacement``)
N is public by the definition of the relation, and is shown exactly.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

from .guarantee import NON_PRIVATE, qualifier
from .ledger import PrivacyLedger

CARD_JSON, CARD_MD = "privacy_card.json", "privacy_card.md"
ACCOUNTANT_NAMES = {"rdp": "RDP (autodp)", "pld": "PLD (dp-accounting)"}
# settings whose value is a path on the user's machine: never written into a release or a card
PATH_KEYS = ("root", "path", "data_root", "output_dir", "autoencoder_cache", "cache_dir", "log_dir", "work_dir")


def n_is_public(relation: str | None) -> bool:
    """Is the number of private records public under this neighbouring relation?  Only under replace-one."""
    return relation == "replace_one"


def dataset_size(relation: str | None, exact: int, noisy: float | None = None) -> dict:
    """What may be published about the private set's size: exact under replace-one; else the noisy
    released count (or nothing)."""
    if n_is_public(relation):
        return {"exact": int(exact), "noisy": None,
                "note": "public: the replace-one relation keeps the number of records fixed"}
    return {"exact": None, "noisy": None if noisy is None else round(float(noisy), 1),
            "note": "the exact number of private records is protected under add/remove neighbours and is not "
                    "published" + ("; the noisy count is a post-processing of the released (noised) class counts"
                                   if noisy is not None else "")}


def public_signature(signature: dict, relation: str | None) -> dict:
    """A run's resume signature as it may appear in a release: without the private record count
    under add/remove (it stays in the private checkpoint, where a resume compares it)."""
    return dict(signature) if n_is_public(relation) else {k: v for k, v in signature.items() if k != "n_private"}


def public_config(config: dict) -> dict:
    """The composed config without machine paths, the logger and Hydra's own settings."""
    from ..utils import (
        without_keys,  # here: the card's paths are checked before torch loads (dpgen sample)
    )

    return without_keys({k: v for k, v in config.items() if k not in ("paths", "logger", "hydra")}, PATH_KEYS)


def config_hash(config: dict) -> str:
    """sha256 (first 16 hex digits) of the public composed config, keys sorted: equal hashes, equal settings."""
    return hashlib.sha256(json.dumps(public_config(config), sort_keys=True, default=str).encode()).hexdigest()[:16]


def _finite(x: float | None) -> float | str | None:
    return None if x is None else (x if math.isfinite(x) else "inf")


def build_card(ledger: PrivacyLedger, *, method: str, preset: str, config: dict, dataset: str, n_private: int,
               noisy_count: float | None = None, public_data: list[str] | None = None, code_version: str | None = None,
               release_file: str | None = None, convention: dict | None = None, export: dict | None = None,
               validation_held_out: int | None = None, processes: dict | None = None,
               public_split_size: int | None = None) -> dict:
    """The card of a release, from the ledger that ran (``n_private`` is used only under replace-one).

    ``validation_held_out``: the number of sensitive images cut off the training split before any private
    step (``dataset.validation_size``; a setting, public); the release never saw them.
    ``public_split_size``: the records of a public split cut from the same records (``dataset.public_fraction``):
    with the fraction it pins the private count, so the card lists it under what it does not cover."""
    relation = ledger.relation
    calibrating = ledger.calibrating_accountant
    eps = {name: _finite(ledger.epsilon(accountant=name)) for name in ("rdp", "pld")}
    non_private = ledger.guarantee == NON_PRIVATE
    card = {
        "method": method,
        "preset": preset,
        "config_hash": config_hash(config),
        "dataset": {"name": dataset, "size": dataset_size(relation, n_private, noisy_count),
                    **({"validation_held_out": {
                        "size": int(validation_held_out),
                        "note": "sensitive images held out of the training split (seed 0) before any private step: "
                                "the release never saw them; an evaluation that selects on them reads private "
                                "data outside this guarantee"}} if validation_held_out else {})},
        "privacy": {
            "epsilon": eps[calibrating],
            "delta": ledger.delta,
            "target_epsilon": ledger.target_epsilon,
            "calibrating_accountant": ACCOUNTANT_NAMES[calibrating],
            "epsilon_by_accountant": {ACCOUNTANT_NAMES[k]: v for k, v in eps.items() if v is not None},
            "guarantee": ledger.guarantee,
            "guarantee_note": qualifier(ledger.guarantee) or None,
            "neighbouring_relation": relation,
            "sampling": ledger.sampling,
            "delta_reserved_for_sensitivity": ledger.delta_reserved,
            "releases": ledger.steps,
            "mechanisms": [{"mechanism": e.mechanism, "noise_multiplier": e.noise_multiplier,
                            "sample_rate": e.sample_rate, "releases": e.steps, "relation": e.relation,
                            "guarantee": e.guarantee} for e in ledger.entries],
            **({"paper_convention": convention} if convention else {}),
        },
        "public_data": public_data or [],
        "code_version": code_version,
        **({"processes": processes} if processes else {}),  # world size, backend, a resume on another world size
        **({"release_file": release_file} if release_file else {}),
        **({"export": export} if export else {}),
    }
    card["covers"] = _covers(card, non_private)
    card["does_not_cover"] = _does_not_cover(card, held_out_fraction(config))
    fraction = (config.get("dataset") or {}).get("public_fraction")
    if public_split_size and relation == "add_remove" and fraction:
        card["does_not_cover"].append(
            f"The size of the public split, {public_split_size} records cut from the same records (the dataset's "
            f"public_fraction, {fraction}): with the fraction it reveals the number of private records to within "
            "a few, although the card does not publish that number.")
    return card


def _processes_line(p: dict) -> str:
    """The card's line of how the run was spread over processes."""
    backend = f" ({p['backend']})" if p.get("backend") else ""
    resumed = p.get("resumed_from_world_size")
    again = f"; resumed from a checkpoint written by {resumed} process{'es' if resumed > 1 else ''}" if resumed else ""
    return f"| processes | {p['world_size']}{backend}{again} |"


def add_evaluation_reads(folder: str | Path, reads: list[str]) -> tuple[Path, Path]:
    """Complete the card of a run's release (``privacy_card.json`` / ``.md`` in ``folder``) after its evaluation:
    ``reads`` names every read of private data the evaluation made outside the guarantee (un-noised numbers,
    e.g. an FID against the sensitive training images), listed under what the card does not cover."""
    path = Path(folder) / CARD_JSON
    card = json.loads(path.read_text())
    card["evaluation_reads_outside_guarantee"] = list(reads)
    item = ("The evaluation's reads of private data, without noise: " + "; ".join(reads) + ". The numbers they give "
            "(in results.json, the console and W&B, each labelled 'not covered by the privacy guarantee') are not "
            "protected; the release and everything sampled from it do not depend on them.")
    card["does_not_cover"] = [i for i in card["does_not_cover"] if not i.startswith("The evaluation's reads")] + [item]
    return write_card(card, folder)


def held_out_fraction(config: dict) -> float | None:
    """``dataset.test_fraction`` when the test split is held out of the same records (else None)."""
    frac = (config.get("dataset") or {}).get("test_fraction")
    try:
        return float(frac) if frac is not None and 0.0 < float(frac) < 1.0 else None
    except (TypeError, ValueError):
        return None


def _covers(card: dict, non_private: bool) -> str:
    p = card["privacy"]
    if non_private:
        return "Nothing: this run released private data without noise (epsilon = infinity)."
    who = ("adding or removing one record" if p["neighbouring_relation"] == "add_remove"
           else "replacing one record by another")
    text = (f"The released model, and everything sampled from it, is ({p['epsilon']:.4g}, {p['delta']:.3g})-"
            f"differentially private under {p['calibrating_accountant']} with respect to {who} of the private "
            f"training set of {card['dataset']['name']}: the private records enter only through "
            f"{p['releases']} noised release(s) recorded in the ledger; any sample or model derived from the release is "
            "post-processing and costs no further privacy.")
    if p["guarantee"] != "rigorous":
        text += f" Caution: {p['guarantee_note']}."
    return text


def _does_not_cover(card: dict, test_fraction: float | None = None) -> list[str]:
    items = [
        "The choice of hyper-parameters (the preset, the noise and clipping settings): they are assumed fixed a priori; "
        "tuning them on the private data would cost privacy that this card does not count.",
        "Public data (" + (", ".join(card["public_data"]) if card["public_data"] else "none used") + "): it is not "
        "protected at all.",
        "The set of labels and the image shape/value range: treated as public facts; labels of private records are "
        "protected only as part of the record.",
    ]
    held = card["dataset"].get("validation_held_out")
    if held:
        items.append(f"The {held['size']} sensitive validation images held out of the training split: the release "
                     "never saw them, so they are not protected by it; evaluations that read them (a model "
                     "selection on them, as DPImageBench's) are outside this guarantee.")
    if card["privacy"]["neighbouring_relation"] == "add_remove" and any(
            m["sample_rate"] < 1.0 for m in card["privacy"]["mechanisms"]):
        items.append("The sample rate and the number of steps were set from the private set size N before training, "
                     "as in standard DP-SGD practice; they are published here and reveal N.")
    if card["privacy"]["neighbouring_relation"] == "add_remove" and test_fraction is not None:
        items.append(f"The test split was held out of the same records (the dataset's test_fraction, "
                     f"{test_fraction:g}): its size, published with the evaluation (e.g. the FID reference size), "
                     f"reveals the number of records to within about {1 / test_fraction:.0f}. Give the dataset a "
                     "separate test_path to keep them apart.")
    return items


def card_markdown(card: dict) -> str:
    """A short Markdown rendering of ``card`` for a person."""
    p, size = card["privacy"], card["dataset"]["size"]
    if size["exact"] is not None:
        n = f"{size['exact']} records (public under replace-one)"
    elif size["noisy"] is not None:
        n = f"≈ {size['noisy']:g} records (noisy released count; the exact count is not published)"
    else:
        n = "not published (protected under add/remove)"
    eps_lines = "\n".join(f"| ε under {k} | {v if isinstance(v, str) else f'{v:.4g}'} |"
                          for k, v in p["epsilon_by_accountant"].items())
    mech = "; ".join(f"{m['mechanism'] or 'release'} σ/Δ = {m['noise_multiplier']:.4g}, q = {m['sample_rate']:.4g}, "
                     f"{m['releases']} release(s)" for m in p["mechanisms"]) or "none"
    eps = p["epsilon"] if isinstance(p["epsilon"], str) else f"{p['epsilon']:.4g}"
    lines = [
        f"# Privacy card — {card['method']} ({card['preset']})", "",
        "| | |", "|---|---|",
        f"| guarantee | **(ε = {eps}, δ = {p['delta']:.3g})**, {p['guarantee']} |",
        f"| calibrating accountant | {p['calibrating_accountant']} |",
        eps_lines,
        f"| neighbouring relation | {p['neighbouring_relation']} |",
        f"| sampling | {p['sampling']} |",
        f"| private releases | {p['releases']} |",
        f"| noise | {mech} |",
        f"| dataset | {card['dataset']['name']}: {n} |",
        *([f"| validation held out | {card['dataset']['validation_held_out']['size']} sensitive images, never seen "
           "by the release |"] if card["dataset"].get("validation_held_out") else []),
        f"| public data | {', '.join(card['public_data']) or 'none'} |",
        *([f"| evaluation read private data | {'; '.join(card['evaluation_reads_outside_guarantee'])} (not "
           "covered) |"] if card.get("evaluation_reads_outside_guarantee") else []),
        f"| config hash | `{card['config_hash']}` |",
        f"| code version | {card['code_version'] or 'unknown'} |",
        *([_processes_line(card["processes"])] if card.get("processes") else []),
    ]
    if card.get("export"):
        e = card["export"]
        lines.append(f"| export | {e.get('n')} samples, labels {e.get('labels')}, format {e.get('format')} |")
    lines += ["", "## What the guarantee covers", "", card["covers"], "",
              "## What it does not cover", "", *[f"- {item}" for item in card["does_not_cover"]], ""]
    return "\n".join(lines)


def card_paths(export: str | Path) -> tuple[Path, Path]:
    """The card files of an export: ``synth.npz`` -> ``synth.card.json`` / ``synth.card.md`` beside it (so
    exports sharing a folder keep one card each); a folder export holds ``privacy_card.json`` / ``.md``."""
    export = Path(export)
    if export.suffix == "":
        return export / CARD_JSON, export / CARD_MD
    return export.with_name(f"{export.stem}.card.json"), export.with_name(f"{export.stem}.card.md")


def write_card(card: dict, folder: str | Path, paths: tuple[Path, Path] | None = None) -> tuple[Path, Path]:
    """Write the card as JSON and Markdown: ``paths`` (see :func:`card_paths`), else ``privacy_card.json`` and
    ``privacy_card.md`` in ``folder`` (the card of a run's release); returns both paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    js, md = paths or (folder / CARD_JSON, folder / CARD_MD)
    js.write_text(json.dumps(card, indent=2, ensure_ascii=False) + "\n")
    md.write_text(card_markdown(card))
    return js, md

"""The evidence files ``evidence/*.json``, read without the scoreboard: one file per
finished run, its overrides and what they change (``evidence.py`` writes them and matches them to the
registry; ``dpgen presets status`` reads them here)."""

from __future__ import annotations

import fnmatch
import json

from ..paths import ROOT

STORE = ROOT / "evidence"

# overrides (and resolved-config keys) that do not change what a run measures
# evaluator.workers: the CNN in a second process or this one, the same numbers (tests/runs/test_eval_workers.py)
# trainer.graph: how the steps are launched (a replay runs the captured step's kernels: the same numbers,
# tests/methods/test_capture.py), not what they compute
NEUTRAL = ("seed", "logger", "logger.*", "trainer.progress", "trainer.log_every", "trainer.threads", "trainer.graph",
           "trainer.checkpoint_every", "trainer.device", "trainer.resume", "hydra.*", "model.autoencoder_cache",
           "evaluator.fid.cache_dir", "evaluator.device", "evaluator.workers", "paths.*", "experiment_name", "dataset.seed")


def load_store(store=STORE) -> list[dict]:
    """Every stored run, in file-name order (so a render is deterministic)."""
    return [json.loads(p.read_text()) for p in sorted(store.glob("*.json"))] if store.is_dir() else []


def override_key(override: str) -> str:
    """``a.b`` of ``a.b=1``, ``+a.b=1`` or ``~a.b``."""
    return override.split("=", 1)[0].lstrip("+~")


def neutral(key: str) -> bool:
    """Whether a setting is bookkeeping (seed, logging, paths, ...) rather than what a run measures."""
    return any(fnmatch.fnmatch(key, pat) for pat in NEUTRAL)


def effective_overrides(ev: dict) -> list[str]:
    """The run's overrides that change what it measures (not ``experiment=``, not bookkeeping), sorted."""
    return sorted(o.lstrip("+~") for o in ev.get("overrides") or []
                  if override_key(o) != "experiment" and not neutral(override_key(o)))

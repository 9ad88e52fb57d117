"""Every ``_target_`` a preset instantiates receives only keys its signature accepts.

A network switched by changing ``_target_`` inside an inherited node keeps the old network's keys
(OmegaConf merges dicts): the run then dies at instantiation, after the data is loaded.  Presets
switch networks through config groups (``override /model/generator: dcgan_decoder``), which
replace the node; this test checks every nested node of every composed preset against the
signature of the callable it names.
"""

from __future__ import annotations

import inspect

import pytest
from hydra.utils import get_object
from omegaconf import DictConfig, ListConfig, OmegaConf

from dpgen.presets import presets
from tests.helpers.configs import CONFIGS, compose_cfg

HYDRA_KEYS = {"_target_", "_partial_", "_convert_", "_recursive_", "_args_"}


def unaccepted_keys(node, path: str = "") -> list[str]:
    """``path.key`` for every key of a ``_target_`` node (at any depth) that its callable does not accept."""
    bad = []
    if isinstance(node, DictConfig):
        target = node.get("_target_")
        if target is not None:
            params = inspect.signature(get_object(target)).parameters.values()
            if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
                names = {p.name for p in params}
                bad += [f"{path}{k} ({target})" for k in node if k not in HYDRA_KEYS and k not in names]
        for k in node:
            bad += unaccepted_keys(node._get_node(k), f"{path}{k}.")
    elif isinstance(node, ListConfig):
        for i, item in enumerate(node):
            bad += unaccepted_keys(item, f"{path}{i}.")
    return bad


@pytest.mark.parametrize("preset", presets())
def test_every_target_of_the_preset_accepts_its_keys(preset, tmp_path):
    cfg = compose_cfg([f"experiment={preset}"], out_dir=tmp_path)
    assert not unaccepted_keys(cfg), f"{preset}: keys that no parameter takes: {unaccepted_keys(cfg)}"


def test_the_check_flags_the_keys_a_switched_network_inherits():
    """The old way of switching: a new ``_target_`` merged into the default generator's node."""
    conv = OmegaConf.load(CONFIGS / "model" / "generator" / "conv_cond.yaml")
    merged = OmegaConf.create({"model": {"generator": OmegaConf.merge(conv, {"_target_": "dpgen.models.DCGANDecoder"})}})
    assert sorted(unaccepted_keys(merged)) == [f"model.generator.{k} (dpgen.models.DCGANDecoder)"
                                               for k in ("channels", "hidden", "kernel_size")]

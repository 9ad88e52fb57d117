"""One source of defaults: a method built in Python with its constructor's defaults is the method its
config group (configs/model/*.yaml) builds.  For every group, each setting the group gives that the
constructor also defaults must have the same value; a class shared by groups that disagree on a setting
has no default for it (the caller must choose, as each group does).  The nested parts a group builds
(``model.alignment``, the projection DP settings ``model.dp`` / ``model.alignment.dp``) are checked the
same way, and a method's ``default_dp`` (what it uses when given no ``dp``) is its group's ``dp``."""

from __future__ import annotations

import inspect
from collections import defaultdict

import pytest
from hydra.utils import get_class
from omegaconf import OmegaConf

from dpgen.privacy.projection import as_projection_dp
from tests.helpers.configs import CONFIGS, compose_cfg

GROUPS = sorted(p.stem for p in (CONFIGS / "model").glob("*.yaml"))
NESTED = ("alignment", "dp")  # nested nodes built by the group that are method parts with defaults of their own


def _parameters(cls) -> dict[str, inspect.Parameter]:
    """The constructor's parameters, following ``**kw`` to the parents' constructors."""
    params: dict[str, inspect.Parameter] = {}
    for klass in cls.__mro__:
        if "__init__" not in klass.__dict__ or klass is object:
            continue
        sig = dict(inspect.signature(klass.__init__).parameters)
        for k, p in sig.items():
            if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and k != "self":
                params.setdefault(k, p)
        if not any(p.kind == p.VAR_KEYWORD for p in sig.values()):
            break
    return params


def _nodes(group: str) -> list[tuple[str, dict]]:
    """The group's model node and every nested part in it (``alignment``, ``dp``, ``alignment.dp``)."""
    model = OmegaConf.to_container(compose_cfg([f"model={group}"]).model, resolve=True)
    out = [(f"model={group}", model)]
    for where, node in out:
        out += [(f"{where} {k}", node[k]) for k in NESTED if isinstance(node.get(k), dict)]
    return out


def _same(a, b) -> bool:
    a = list(a) if isinstance(a, tuple) else a
    b = list(b) if isinstance(b, tuple) else b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float | int) and isinstance(b, float | int) and not isinstance(a, bool) and not isinstance(b, bool):
        return a == pytest.approx(b, rel=1e-9)
    return a == b


def test_constructor_defaults_equal_the_config_groups():
    values: dict[tuple[str, str], dict[str, object]] = defaultdict(dict)  # (class, key) -> group -> value
    nodes = [n for g in GROUPS for n in _nodes(g)]
    for where, node in nodes:
        for key, value in node.items():
            if not key.startswith("_") and not isinstance(value, dict):
                values[(node["_target_"], key)][where] = value
    wrong = []
    for where, node in nodes:
        params = _parameters(get_class(node["_target_"]))
        for key, value in node.items():
            p = params.get(key)
            if key.startswith("_") or isinstance(value, dict) or p is None:
                continue
            shared = values[(node["_target_"], key)]
            disagree = len({repr(v) for v in shared.values()}) > 1 and not all(
                _same(v, value) for v in shared.values())
            if disagree:
                if p.default is not inspect.Parameter.empty:
                    wrong.append(f"{where}: {key} differs between {sorted(shared)}, so the constructor has no default "
                                 f"for it (it has {p.default!r})")
            elif p.default is inspect.Parameter.empty:
                continue  # required in Python, given by the group
            elif not _same(p.default, value):
                wrong.append(f"{where}: {key} = {value!r} in the config, {p.default!r} in the constructor")
    assert not wrong, "\n".join(wrong)


def test_a_methods_default_dp_is_its_groups_dp():
    """``dp`` is a mapping in the config and ``None`` by default in Python, where the method takes its
    ``default_dp``: the two must be the same settings."""
    wrong = []
    for where, node in (n for g in GROUPS for n in _nodes(g)):
        if isinstance(node.get("dp"), dict):
            default = get_class(node["_target_"]).default_dp
            if as_projection_dp(node["dp"], default) != default:
                wrong.append(f"{where}: dp = {node['dp']} in the config, {default} in the class")
    assert not wrong, "\n".join(wrong)


def test_the_comparison_can_fail():
    class Method:
        def __init__(self, label_mode: str = "concat") -> None: ...

    assert not _same(_parameters(Method)["label_mode"].default, "partition")

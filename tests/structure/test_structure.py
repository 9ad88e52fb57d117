"""The package's layering: the privacy core imports nothing above it, the method interface does not
import the loop that drives it, and the privacy package's face exports every mechanism."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import dpgen.privacy as privacy
from dpgen.privacy.mechanisms import Mechanism

PKG = Path(privacy.__file__).resolve().parents[1]
ABOVE_PRIVACY = {"audit", "bench", "config", "eval", "logging", "methods", "models", "pipeline", "report",
                 "reproduce", "presets", "cli"}


def _dpgen_imports(path: Path) -> set[str]:
    """The first dpgen sub-package / module each import of ``path`` names (relative imports resolved)."""
    parts = path.relative_to(PKG.parent).with_suffix("").parts[:-1]  # the file's package, e.g. (dpgen, privacy)
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = list(parts[: len(parts) - node.level + 1]) if node.level else []
            full = base + (node.module.split(".") if node.module else [])
            names = [full + [a.name] for a in node.names] if not node.module else [full]
        elif isinstance(node, ast.Import):
            names = [a.name.split(".") for a in node.names]
        else:
            continue
        out |= {n[1] for n in names if len(n) > 1 and n[0] == "dpgen"}
    return out


def test_the_privacy_core_imports_no_layer_above_it():
    bad = {p.name: sorted(_dpgen_imports(p) & ABOVE_PRIVACY) for p in (PKG / "privacy").glob("*.py")}
    assert not {k: v for k, v in bad.items() if v}


def test_the_method_interface_does_not_import_the_loop():
    tree = ast.parse((PKG / "methods" / "base.py").read_text())
    modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "loop" not in modules and "dpgen.methods.loop" not in modules


def test_the_privacy_package_exports_every_mechanism():
    import dpgen.privacy.moments  # noqa: F401  (defines two mechanisms)

    kinds = {c for c in _subclasses(Mechanism) if not inspect.isabstract(c) and c.__module__.startswith("dpgen.")}
    assert kinds and kinds <= {getattr(privacy, n) for n in privacy.__all__}


def _subclasses(cls: type) -> set[type]:
    return {s for c in cls.__subclasses__() for s in {c, *_subclasses(c)}}

"""The privacy core stands on its own: it speaks its own words, and it has one noise search.

* Its errors name a setting in the core's vocabulary (``PrivacySettingError(setting, ...)``); the config
  layer maps the setting to the Hydra key.  So no string in ``dpgen/privacy/*.py`` outside docstrings
  names a config key (``model.``, ``accountant.``, ``trainer.``, ``dataset.``), and no module there imports
  ``ConfigError``.
* Every noise (sigma) search is ``privacy.calibration.calibrate``: no other function named ``calibrate*``
  in the core (the ledger's ``calibrate`` method delegates to it), and no bisection or Brent search
  outside ``calibration.py``.
"""

from __future__ import annotations

import ast
import re

import pytest

from tests.helpers import ROOT

PRIVACY = sorted((ROOT / "dpgen" / "privacy").glob("*.py"))
HYDRA_KEY = re.compile(r"(?<![\w.])(model|accountant|trainer|dataset)\.[A-Za-z_]")


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring nodes of the module, its classes and functions."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _strings(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, text) of every string literal but the docstrings (f-strings: their literal parts)."""
    docs = _docstrings(tree)
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs]


@pytest.mark.parametrize("path", PRIVACY, ids=lambda p: p.name)
def test_the_privacy_core_names_no_config_key_and_raises_no_config_error(path):
    tree = ast.parse(path.read_text())
    keys = [f"{path.name}:{line}: {text!r}" for line, text in _strings(tree) if HYDRA_KEY.search(text)]
    assert not keys, "a config key in the privacy core (raise PrivacySettingError(setting, ...) instead):\n" + \
        "\n".join(keys)
    imports = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
               and any(a.name == "ConfigError" for a in node.names)]
    assert not imports, f"{path.name} imports ConfigError (lines {imports}): the core raises PrivacySettingError"


def test_the_scan_finds_a_config_key_in_a_message_but_not_in_a_docstring():
    tree = ast.parse('def f(b):\n    """Reads ``model.batch_size``."""\n'
                     '    raise ValueError(f"model.batch_size={b} is too large")\n')
    assert [text for _, text in _strings(tree) if HYDRA_KEY.search(text)] == ["model.batch_size="]
    assert not HYDRA_KEY.search("dpgen.privacy.accountants.calibrate")


def test_every_noise_search_is_the_one_calibrate():
    calibrates, searches = [], []
    for path in PRIVACY:
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("calibrate"):
                calibrates.append(f"{path.name} {node.name}")
        if path.name != "calibration.py" and re.search(r"\bbrentq\b|\bbisect|while hi - lo", text):
            searches.append(path.name)
    # the ledger's method hands its history and reserved delta to calibration.calibrate
    assert sorted(calibrates) == ["calibration.py calibrate", "ledger.py calibrate"], calibrates
    assert not searches, f"a noise search outside privacy/calibration.py: {searches}"
    ledger = (ROOT / "dpgen" / "privacy" / "ledger.py").read_text()
    assert "from .calibration import calibrate" in ledger

"""Where dpgen finds its files.

``PACKAGE`` is the installed ``dpgen/`` folder.  ``ROOT`` is the checkout around it (``train.py``,
``configs/``, ``docs/``, ``scripts/``) when dpgen runs from a source checkout or an editable install;
an installed wheel has no checkout, so the commands that read or write ``docs/`` (the scoreboard, the
presets guide, the benchmarks) are for a checkout only.

The Hydra configs: ``configs/`` of the checkout is the folder users edit, and the one a run from the
checkout reads.  The wheel ships the same files as the package ``dpgen.configs`` (``pyproject.toml``
maps the top-level ``configs/`` onto it), which Hydra reads through its ``pkg://`` search path.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
ROOT = PACKAGE.parent
DOCS = ROOT / "docs"
CONFIG_PACKAGE = "dpgen.configs"  # the wheel's copy of configs/
IN_CHECKOUT = (ROOT / "configs" / "train.yaml").is_file() and (ROOT / "pyproject.toml").is_file()
CONFIGS = ROOT / "configs" if IN_CHECKOUT else PACKAGE / "configs"  # a folder either way (a wheel installs files)
HYDRA_CONFIGS = str(CONFIGS) if IN_CHECKOUT else f"pkg://{CONFIG_PACKAGE}"  # Hydra's config_path

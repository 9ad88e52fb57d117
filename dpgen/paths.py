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


def code_version() -> str | None:
    """``git rev-parse --short HEAD`` of the checkout holding this package, ``+ uncommitted changes`` when
    tracked files differ from it; None outside a git checkout (an installed package)."""
    import subprocess

    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + (" + uncommitted changes" if dirty else "")

"""The W&B settings' checks (no torch: the command-line checks run them before torch loads): the mode a run
uses and whether an online run has a login."""

from __future__ import annotations

import os

from ..errors import ConfigError

WANDB_MODES = ("online", "offline", "disabled")
_WANDB_ALIASES = {"dryrun": "offline", "run": "online"}  # W&B's older spellings of WANDB_MODE


def wandb_mode(configured: str) -> str:
    """The W&B mode a run uses: ``WANDB_MODE`` from the environment wins over ``logger.wandb.mode`` (as
    W&B itself documents), e.g. ``WANDB_MODE=offline python train.py ...`` on a machine without network."""
    if configured not in WANDB_MODES:  # checked even when the environment overrides it
        raise ConfigError(f"logger.wandb.mode={configured!r} is not a W&B mode; use online, offline or disabled")
    env = os.environ.get("WANDB_MODE", "").strip().lower()
    mode = _WANDB_ALIASES.get(env, env) if env else configured
    if mode not in WANDB_MODES:
        raise ConfigError(f"the environment variable WANDB_MODE={env!r} is not a W&B mode; use online, offline or "
                          "disabled")
    return mode


def wandb_logged_in() -> bool | None:
    """Whether W&B has credentials (API key in WANDB_API_KEY / netrc, or an identity token file) — read
    the way ``wandb`` reads them, without prompting; None when this wandb version cannot say."""
    try:
        from wandb.sdk import wandb_setup
        from wandb.sdk.lib import wbauth

        settings = wandb_setup.singleton().settings
        return bool(settings.api_key or settings.identity_token_file or wbauth.read_netrc_auth(host=settings.base_url))
    except Exception:  # noqa: BLE001 - another wandb version: wandb.init reports a missing login itself
        return None


NOT_LOGGED_IN = ("W&B is online (logger.wandb.mode=online or WANDB_MODE=online) but not logged in (no API key); "
                 "fix: run `wandb login`, or log offline with WANDB_MODE=offline (upload later with `wandb sync`), "
                 "or log to local files only with logger=local")


def check_wandb(wandb_cfg) -> None:
    """Before any data is loaded: the W&B mode is valid, and an online run has a W&B login."""
    if wandb_cfg is None:
        return
    if wandb_mode(wandb_cfg.get("mode", "offline")) == "online" and wandb_logged_in() is False:
        raise ConfigError(NOT_LOGGED_IN)

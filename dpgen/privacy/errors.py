"""The privacy core's own error: a privacy setting it cannot accept.

The core is usable without Hydra, so its messages name the setting in its own words (``setting``:
``target_epsilon``, ``noise_multiplier``, ``bound``, ...), never a config key; the config layer
(``dpgen.config.privacy_setting_error``) turns one into a ``ConfigError`` naming the Hydra key.
"""

from __future__ import annotations


class PrivacySettingError(ValueError):
    """A privacy setting is invalid; ``setting`` names it in the core's vocabulary."""

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(message)
        self.setting = setting

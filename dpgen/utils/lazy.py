"""A package face whose names load on first use (PEP 562): ``__getattr__`` and ``__dir__`` for a package."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable


def lazy_exports(package: str, where: dict[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``package.<name>`` imports ``package.<where[name]>`` on first
    use and keeps the name in the package's namespace."""

    def __getattr__(name: str):
        if name in where:
            value = getattr(importlib.import_module(f"{package}.{where[name]}"), name)
            setattr(sys.modules[package], name, value)
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(where))

    return __getattr__, __dir__

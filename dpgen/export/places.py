"""Where an export reads and writes, checked before torch loads (``dpgen sample`` refuses a wrong place in a
second): the release file of a run folder (never a checkpoint), and the place of an export (``--out``: its
kind, nothing replaced without ``--force``, writable)."""

from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError
from ..privacy.card import CARD_JSON, card_paths

RELEASE_FILES = ("generator.pt", "release.pt", "classifier.pt", "da_model.pt")
SUFFIXES = ("", ".npz", ".pt")  # a PNG folder, arrays, a model's weights


def find_release(path: str | Path) -> Path:
    """The release file of ``path`` (a release file or a run folder); refuses a checkpoint."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"{p} does not exist: give a run folder or its release file (e.g. <run>/generator.pt)")
    if p.is_dir():
        if p.name == "checkpoints":
            raise checkpoint_error(p / "last.pt")
        found = [p / n for n in RELEASE_FILES if (p / n).is_file()]
        if not found:
            raise ConfigError(f"{p} holds no release ({', '.join(RELEASE_FILES)}): give the folder of a finished "
                              "run (the release is written at the end of training)")
        return found[0]
    if p.parent.name == "checkpoints":
        raise checkpoint_error(p)
    return p


def checkpoint_error(p: Path) -> ConfigError:
    return ConfigError(f"{p} is a training checkpoint: it holds the RNG states and the ledger of a private run and is "
                       "as sensitive as the data, so it is never sampled from; use the run's release file "
                       f"(e.g. {p.parent.parent / 'generator.pt'}) or the run folder")


def check_suffix(out: Path, words: tuple[str, str] = ("--out", "--force")) -> None:
    """``out`` is an export dpgen writes: a ``.npz`` file, a folder (no suffix) or ``.pt`` (a model's weights)."""
    if out.suffix not in SUFFIXES:
        raise ConfigError(f"{words[0]} {out}: write a .npz file or a folder (PNG images per class); .pt copies a model")


def check_out(out: Path, force: bool, words: tuple[str, str] = ("--out", "--force")) -> None:
    """An export never replaces a file, a folder or a card without ``force`` (and a folder only when it
    holds a previous export: its card); its place must be writable.  ``words``: how the errors name the
    out and force settings (``--out`` / ``--force`` on the command line, ``out`` / ``force=True`` in Python)."""
    name, force_word = words
    cards = [p for p in card_paths(out) if p.exists()]
    if out.suffix == "":
        if out.exists() and not out.is_dir():
            raise ConfigError(f"{name} {out} is a file, not a folder; choose a new folder for a PNG export")
        if out.is_dir() and any(out.iterdir()):
            if not force:
                raise ConfigError(f"{name} {out} is a folder that is not empty: choose a new folder, or pass {force_word} "
                                  "to replace a previous export there")
            if not cards:
                raise ConfigError(f"{name} {out} is a folder that is not empty and holds no export of dpgen (no "
                                  f"{CARD_JSON}): {force_word} replaces only a previous export; choose a new folder")
        unwritable(out, out, name)
        return
    if not force:
        taken = [str(p) for p in ([out] if out.exists() else []) + cards]
        if taken:
            raise ConfigError(f"{name} {out}: {', '.join(taken)} already exist(s); choose another name, or pass "
                              f"{force_word} to replace the export and its card")
    unwritable(out.parent, out, name)


def unwritable(folder: Path, out: Path, name: str) -> None:
    """ConfigError when ``folder`` (where the export and its card go) cannot be created or written: the OS
    answers (a probe file is made and removed; the folders made for it are removed again: the export makes them)."""
    import tempfile

    made = [p for p in (folder, *folder.parents) if not p.exists()]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".dpgen-probe-"):
            pass
    except OSError as e:
        raise ConfigError(f"{name} {out}: cannot write there ({e.strerror or type(e).__name__}: {e.filename or folder}); "
                          f"choose a writable place for {name}") from None
    finally:
        for p in made:  # deepest first
            try:
                p.rmdir()
            except OSError:
                pass

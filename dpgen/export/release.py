"""Releases: what the training loop publishes, and how a sampler is rebuilt from one alone.

A run's weights-only release (``generator.pt``, ``release.pt``, ``classifier.pt``, ``da_model.pt``)
holds ``method.release_state()`` plus, under ``"dpgen"``, the PUBLIC settings needed to rebuild the
method without any data: the composed config (machine paths removed), the dataset's public facts
(name, image shape, classes, value range, how its pixels are stored, the public split's class counts)
and, for latent methods, the public representation; and the privacy card (``"privacy_card"``, also
written as ``privacy_card.json`` / ``.md`` beside the release).  ``release_info`` builds that at the
end of training (called by the loop through ``TrainContext.release_extra``).

``load_release(path)`` reads a release file or a run folder's release, never ``checkpoints/``
(a checkpoint holds RNG states and the ledger of a private run: as sensitive as the data), and
returns a :class:`Release` whose ``sample(n, labels, seed)`` draws synthetic data with no private data
and no privacy cost (post-processing).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..errors import ConfigError
from ..privacy.card import build_card, public_config, write_card
from .places import RELEASE_FILES, checkpoint_error, find_release  # noqa: F401 - the release file of a run

# methods whose release is a predictive model, not a sampler
MODEL_RELEASES = {"DPSGDClassifier": "an image classifier", "DomainAdaptation": "a domain-adaptation classifier"}
# how a dataset's pixels are stored on disk (for exports in the dataset's own format): name -> (dtype, max value)
PIXEL_STORAGE = {"digits": ("uint8", 16)}


# --------------------------------------------------------------------------------- writing
def pixel_storage(name: str, value_range, declared_range=None) -> dict:
    """How a dataset's pixels are stored on disk, for exports in its own format: ``{"dtype", "range"}``.

    A declared ``dataset.pixel_range`` (own data) wins; integer ranges within 0..255 are uint8, others float32.
    """
    if declared_range is not None:
        lo, hi = (float(v) for v in declared_range)
    elif name in PIXEL_STORAGE:
        dtype, top = PIXEL_STORAGE[name]
        return {"dtype": dtype, "range": [0.0, float(top)]}
    elif tuple(float(v) for v in value_range) == (0.0, 1.0):
        lo, hi = 0.0, 255.0
    else:
        return {"dtype": "float32", "range": [float(v) for v in value_range]}
    integer = lo.is_integer() and hi.is_integer() and 0 <= lo < hi <= 255 and hi > 1
    return {"dtype": "uint8" if integer else "float32", "range": [lo, hi]}


def public_facts(data, method, dataset_cfg: dict | None = None) -> dict:
    """The public facts of the dataset a release needs for sampling (no private record, no private count)."""
    dataset_cfg = dataset_cfg or {}
    classes = dataset_cfg.get("classes")
    facts = {"name": data.name, "image_shape": list(data.image_shape), "num_classes": int(data.num_classes),
             "value_range": [float(v) for v in data.value_range],
             "storage": pixel_storage(data.name, data.value_range, dataset_cfg.get("pixel_range")),
             "class_names": [str(c) for c in classes] if isinstance(classes, list) else None,
             "public_class_counts": None if data.public is None else
             torch.bincount(data.public.y.long(), minlength=data.num_classes).tolist()}
    rep = getattr(getattr(method, "space", None), "rep", None)  # a latent method's public linear map
    if rep is not None:
        facts["representation"] = {"kind": rep.kind, "basis": rep.basis.cpu(), "center": rep.center.cpu(),
                                   "radius": float(rep.radius), "image_shape": tuple(rep.image_shape),
                                   "value_range": tuple(rep.value_range)}
    return facts


def released_count(method) -> float | None:
    """A noisy record count the method released through its ledger-recorded mechanism (sum of noisy class counts)."""
    moments = getattr(method, "moments", None)
    counts = getattr(moments, "counts", None)
    return None if counts is None else float(torch.as_tensor(counts).clamp_min(0).sum())


def public_data_used(cfg: dict, data) -> list[str]:
    """Plain-words list of the public data a run used (public split, its autoencoder / representation)."""
    used = []
    if data.public is not None:
        used.append(f"public split of {data.name} ({len(data.public)} records, dataset.public_fraction="
                    f"{(cfg.get('dataset') or {}).get('public_fraction')})")
    model = cfg.get("model") or {}
    if model.get("autoencoder"):
        used.append("an autoencoder trained on the public split")
    if (model.get("representation") or {}).get("kind") == "pca":
        used.append("a PCA of the public split")
    if model.get("feature_map"):
        used.append("a feature map trained on the public split")
    return used


def release_info(cfg: dict, data, method, ledger, code_version: str | None, run_dir: Path,
                 processes: dict | None = None) -> dict:
    """The public part of a release (``"dpgen"``: config + public facts; ``"privacy_card"``), and the card
    files written beside it.  Called once, after the last private release."""
    card = build_card(ledger, method=type(method).__name__, preset=str(cfg.get("experiment_name", "run")),
                      config=cfg, dataset=data.name, n_private=len(data.private),
                      noisy_count=released_count(method), public_data=public_data_used(cfg, data),
                      code_version=code_version, release_file=method.release_name,
                      convention=method.convention_report(), processes=processes,
                      validation_held_out=None if getattr(data, "validation", None) is None else len(data.validation),
                      public_split_size=None if data.public is None else len(data.public))
    write_card(card, run_dir)
    return {"dpgen": {"config": public_config(cfg), "data": public_facts(data, method, cfg.get("dataset"))}, "privacy_card": card}


# --------------------------------------------------------------------------------- reading
@dataclass
class PublicData:
    """The public facts of a dataset, standing in for ``DataSplits`` when a method is rebuilt from a release."""

    name: str
    image_shape: tuple[int, int, int]
    num_classes: int
    value_range: tuple[float, float]
    public: None = None
    test: None = None
    extra: dict = field(default_factory=dict)

    @property
    def dim(self) -> int:
        c, h, w = self.image_shape
        return c * h * w


@dataclass
class Release:
    """A loaded release: ``card`` (the privacy card), ``config`` (public composed config), ``data`` (public
    facts), ``method_name``; ``sample`` for generators, ``path`` of the weights for every method."""

    path: Path
    state: dict
    card: dict
    config: dict
    data: dict
    method_name: str
    _method: object = None

    @property
    def is_generator(self) -> bool:
        return self.method_name not in MODEL_RELEASES

    @property
    def num_classes(self) -> int:
        return int(self.data["num_classes"])

    def method(self):
        """The method rebuilt from the release (built once)."""
        if self._method is None:
            if not self.is_generator:
                raise ConfigError(f"{self.path.name} is {MODEL_RELEASES[self.method_name]} ({self.method_name}), not a "
                                  "generator: it has nothing to sample; export the model itself with "
                                  "`dpgen sample <run> --out model.pt` (the weights with their privacy card)")
            self._method = rebuild(self)
        return self._method

    def sample(self, n: int, labels=None, seed: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` synthetic images ``(n, C, H, W)`` (floats in the dataset's value range, [0, 1] for images) and
        labels ``(n,)``.

        ``labels``: None / ``"balanced"`` (equal counts), ``"proportional"`` (the released noisy or the public
        class counts, never the exact private ones), a list of classes (balanced over them) or a tensor of labels.
        ``seed``: None draws fresh randomness.  Post-processing of the release: no privacy cost.
        """
        from .labels import plan_labels

        if int(n) < 1:
            raise ConfigError(f"--n must be >= 1, got {n}")
        seed = secrets.randbits(62) if seed is None else int(seed)
        y = plan_labels(int(n), labels, self, seed)
        method = self.method()
        torch.manual_seed(seed)
        for attr in ("sample_generator", "_pool_gen"):  # methods that draw from their own generator
            if hasattr(method, attr):
                setattr(method, attr, torch.Generator().manual_seed(seed))
        x, y_out = method.sample(int(n), y)
        return x.float(), y_out.long()

    def export(self, out: str | Path, n: int, labels=None, seed: int | None = None, force: bool = False,
               words: tuple[str, str] = ("out", "force=True"), fmt: str = "auto") -> list[Path]:
        """Sample and write ``out`` (.npz, a PNG folder, or .pt for a model) with its own privacy card
        (``synth.npz`` -> ``synth.card.json`` / ``.md``; inside a folder export); an existing export or card is
        replaced only with ``force``.  ``words``: how errors name ``out`` and ``force`` (the command line's
        ``--out`` / ``--force``; Python's keywords by default).  ``fmt="dpimagebench"``: a .npz that DPImageBench's
        ``eval.py`` reads (x float32 in [0, 1], ``(n, C, H, W)``; y int64)."""
        from .formats import export

        return export(self, Path(out), n, labels, seed, force, words, fmt)


def load_release(path: str | Path) -> Release:
    """Load a run folder's or a file's release (weights-only); a checkpoint is refused (``ConfigError``)."""
    p = find_release(path)
    try:
        state = torch.load(p, map_location="cpu", weights_only=False)
    except Exception as err:  # noqa: BLE001 - not a torch file
        raise ConfigError(f"{p} is not a dpgen release ({type(err).__name__}); give a run folder or its "
                          "generator.pt / release.pt / classifier.pt / da_model.pt") from None
    if not isinstance(state, dict):
        raise ConfigError(f"{p} is not a dpgen release: give a run folder or its release file")
    if "ledger" in state or "rng" in state:
        raise checkpoint_error(p)
    if "dpgen" not in state or "privacy_card" not in state:
        raise ConfigError(f"{p} was written by an older dpgen without its public settings and privacy card; "
                          "train the run again with this version to sample from it")
    info = state["dpgen"]
    return Release(path=p, state=state, card=state["privacy_card"], config=info["config"], data=info["data"],
                   method_name=str(state.get("signature", {}).get("method", state["privacy_card"]["method"])))


def rebuild(release: Release):
    """Instantiate the release's method from its public config and load the released state (no data)."""
    from hydra.utils import instantiate

    facts = release.data
    data = PublicData(facts["name"], tuple(facts["image_shape"]), int(facts["num_classes"]),
                      tuple(facts["value_range"]))
    method = instantiate(release.config["model"], _convert_="all")
    builder = _BUILDERS.get(release.method_name)
    if builder is None:
        for cls in type(method).__mro__:  # a subclass of a known method
            builder = _BUILDERS.get(cls.__name__)
            if builder:
                break
    if builder is None:
        raise ConfigError(f"{release.path.name}: sampling a {release.method_name} release is not supported")
    builder(method, release.state, data, release)
    return method


def _class_gaussian(method, state: dict, data: PublicData, release: Release) -> None:
    from ..data.representations import Representation
    from ..privacy.moments import ClassMoments

    method.rep = Representation(method.rep_cfg.get("kind", "dct"), state["basis"], state["center"],
                                float(state["radius"]), tuple(state["image_shape"]), tuple(state["value_range"]))
    method.moments = ClassMoments(state["counts"], state["means"], state["covariances"])
    method.num_classes, method.image_shape = data.num_classes, data.image_shape


def _pixel_generator(method, state: dict, data: PublicData, release: Release) -> None:
    n_labels = 0 if getattr(method, "label_mode", "concat") == "none" else data.num_classes
    method.G = method.make_generator(image_shape=data.image_shape, n_labels=n_labels)
    method.G.load_state_dict(state["generator"])
    method.G.eval()
    method.num_classes, method.device = data.num_classes, torch.device("cpu")


def _latent(method, state: dict, data: PublicData, release: Release) -> None:
    from ..data.representations import Representation

    rep = release.data.get("representation")
    stored = None if rep is None else Representation(rep["kind"], rep["basis"], rep["center"], float(rep["radius"]),
                                                     tuple(rep["image_shape"]), tuple(rep["value_range"]))
    method.restore(data, release.path, representation=stored)  # the public map of the run, not rebuilt from data


_BUILDERS = {"DPClassGaussian": _class_gaussian, "DPSWDGenerator": _pixel_generator, "DPSinkhorn": _pixel_generator,
             "DPSWFlowR": _latent, "DPSWFlow": _latent, "DPSWGen": _latent}

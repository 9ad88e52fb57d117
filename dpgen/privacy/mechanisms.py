"""One object per kind of private release: noise added = noise recorded, by construction.

A :class:`Mechanism` is built from the run's :class:`~dpgen.privacy.ledger.PrivacyLedger` and knows

* its **neighbouring relation**: ``add_remove`` under Poisson subsampling, ``replace_one`` under
  fixed-size sampling without replacement or for a release of the whole private set with N public
  (:func:`neighbouring_relation`).  It is derived from the ledger's sampling, never passed by a method;
* its **L2 sensitivity under that relation**: every subclass implements
  ``sensitivity_under(relation)`` for BOTH relations and the base class evaluates it at the run's
  relation, so a replace-one release of a sum of clipped contributions is accounted with the
  doubled sensitivity 2C (:func:`sum_sensitivity`) — it cannot be forgotten;
* its **noise std** and **noise multiplier** ``= noise_std / sensitivity`` (what the accountant sees),
  its **sample rate** and the **sensitivity failure probability** ``beta`` reserved per release;
* its **noise policy** (:mod:`dpgen.privacy.noise`: ``Calibrated``, ``FixedMultiplier``, ``FixedStd``,
  ``PaperNoise``, ``NotPrivate``), given ONCE when it is built (``noise=``) and applied by the mechanism
  itself as soon as its sensitivity is known; nothing changes the noise afterwards.  A ``Calibrated``
  policy asks the ledger (``ledger.calibrate``, with the reserved beta) for the multiplier of the
  mechanism's ``steps`` planned releases;
* two ``torch.Generator`` of its own, for the noise and for the projection directions
  (:meth:`GaussianProjectionRelease.draw_directions`), secretly seeded from OS entropy unless
  ``trainer.deterministic=true``; their states and the policy are in ``state_dict``, so a resumed run
  draws the directions and the noise an uninterrupted run would have drawn, and refuses a checkpoint
  written under another policy.  Both are generators of the run's device (``device=``, the method passes
  ``ctx.device``): the noise and the directions are drawn where they are used, with the same distribution
  (the privacy argument does not depend on where a Gaussian is drawn), and on the CPU they are the same
  numbers as before.  A run resumed on another device type seeds them from a secret derived from the stored
  states (``privacy.sampler.resumed_generator``: same distribution, other values).

``release(...)`` adds the noise AND records the release in the ledger in the same call (a non-private
mechanism records noise multiplier 0: epsilon = infinity).  ``describe()`` is what results.json shows.

Several processes (``torchrun``; :mod:`dpgen.utils.dist`): a release is the single-process
release of the global batch, whatever the number of processes W.  Each kind DECLARES how the ranks'
parts combine (``reduce``, as torchmetrics' ``add_state(dist_reduce_fx=...)``) and the base class does
the one collective (:meth:`Mechanism.combine`): ``"sum"`` — each rank's sum over its records is
all-reduced (``NoisyGradientSum``, ``ClassMomentRelease``); ``"rows"`` — each rank's rows are
all-gathered in rank order (``GaussianProjectionRelease``); ``"none"`` — every rank already holds the
whole quantity (``ImageGradientSanitiser``, ``UnnoisedAccess``).  The noise is then added by
:meth:`Mechanism.noised` on every rank with the SAME draws: the generators (noise, directions) are
seeded with rank 0's seed and draw the same numbers in the same order everywhere, so every rank
releases one and the same tensor, noised once (the single-process release), with no broadcast.  The
calibrated multiplier is rank 0's, so the ledger (which every rank keeps identically and rank 0
writes) records exactly the single-process entries.  What crosses between processes is un-noised
(partial sums, projected rows): the process group is inside the run's trust boundary.

Kinds: every subclass that sets ``kind`` registers itself in :data:`MECHANISMS` when it is defined
(the kinds table of the privacy docs is generated from it).  Adding a kind: subclass
:class:`Mechanism`, set ``kind`` and ``used_by``, implement ``sensitivity_under`` for both relations
and a ``release`` that computes the clipped quantity, adds ``self.noise(shape, like)`` and calls
``self._record()``; put whatever fixes the sensitivity in ``_config`` (checked on resume).
"""

from __future__ import annotations

import math
import secrets
import warnings
from abc import ABCMeta, abstractmethod
from collections.abc import Callable, Iterable
from typing import ClassVar

import torch

from ..ot.sliced import orthogonal_directions, random_directions
from ..utils import dist
from .dpsgd import clip_scale
from .dpswflow import paper_flow_noise_std, paper_one_shot_sigma
from .errors import PrivacySettingError
from .guarantee import guarantee_label, qualifier
from .image_gradient import CLIP_MODES, clip_per_row, clip_whole
from .ledger import RELATIONS, LedgerEntry, PrivacyLedger, relation_of_sampling
from .noise import (
    Calibrated,
    FixedMultiplier,
    NoisePolicy,
    NotPrivate,
    PaperNoise,
    PaperProjectionNoise,
    check_policy,
    describe_policy,
)
from .per_sample import FlatGrads, GhostGrads, Layout
from .sampler import device_generator, generator_state, resumed_generator
from .sensitivity import check_bound, check_sensitivity_fraction, l2_sensitivity

DIRECTIONS_SEED_OFFSET = 7919  # the directions generator: seed + offset (a deterministic run), else OS entropy too
DIRECTIONS = ("random", "orthogonal")  # orthogonal: sensitivity exactly row_diameter * sqrt(ceil(k/d)), no beta


def check_directions(directions: str) -> str:
    """``directions`` when it is one of :data:`DIRECTIONS`, else the setting's error."""
    if directions not in DIRECTIONS:
        raise PrivacySettingError("directions", f"directions {directions!r} are unknown; choose one of "
                                                f"{', '.join(DIRECTIONS)}")
    return directions


def neighbouring_relation(sampling: str, full_set: bool = False) -> str:
    """``replace_one`` for a release of the whole set (N public), else the relation of ``sampling``."""
    return "replace_one" if full_set else relation_of_sampling(sampling)


def sum_sensitivity(contribution_bound: float, relation: str) -> float:
    """L2 sensitivity of a SUM of per-record contributions each of norm <= C.

    Add/remove one record: the sum moves by one contribution, ``C``.  Replace one record: one
    contribution leaves and another enters, ``2 C``.
    """
    if relation not in RELATIONS:
        raise ValueError(f"unknown neighbouring relation {relation!r}")
    return contribution_bound * (1.0 if relation == "add_remove" else 2.0)


class _AppliesNoisePolicy(ABCMeta):
    """Applies a mechanism's noise policy once its (sub)class constructor has set the sensitivity."""

    def __call__(cls, *args, **kwargs):
        mechanism = super().__call__(*args, **kwargs)
        mechanism._apply_noise_policy()
        return mechanism


MECHANISMS: dict[str, type[Mechanism]] = {}  # kind -> class, filled as each subclass is defined
REDUCES = ("sum", "rows", "none")  # how a kind's parts combine across processes (Mechanism.reduce)


class Mechanism(metaclass=_AppliesNoisePolicy):
    """A private release of one kind: sensitivity under the run's relation, noise fixed once by its
    policy (``privacy.noise``), own generators for the noise and the directions.

    ``steps``: the releases planned (what a :class:`~dpgen.privacy.noise.Calibrated` policy calibrates for;
    ``None`` when the noise is not calibrated).  ``device``: where the noise and the directions are drawn.
    """

    kind: ClassVar[str] = "mechanism"
    release_formula: ClassVar[str] = ""  # what one release adds, for the kinds table of the docs
    used_by: ClassVar[str] = ""  # the methods that release through this kind
    # how the processes' parts of one release combine before the noise (:meth:`combine`): "sum" (each rank
    # holds the sum over its records), "rows" (each rank holds its rows of the batch) or "none" (each rank
    # holds the whole quantity)
    reduce: ClassVar[str] = "none"

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if cls.reduce not in REDUCES:
            raise ValueError(f"{cls.__qualname__}.reduce must be one of {REDUCES}, got {cls.reduce!r}")
        if "kind" in cls.__dict__:  # a concrete kind registers itself (the kinds table of the docs)
            if cls.kind in MECHANISMS and MECHANISMS[cls.kind] is not cls:
                raise ValueError(f"mechanism kind {cls.kind!r} is already {MECHANISMS[cls.kind].__qualname__}")
            MECHANISMS[cls.kind] = cls

    def __init__(self, ledger: PrivacyLedger, *, sample_rate: float, noise: NoisePolicy, steps: int | None = None,
                 full_set: bool = False, seed: int | None = None, accountant: str | None = None,
                 bound: str | None = None, device: torch.device | str | None = None) -> None:
        if not 0.0 < sample_rate <= 1.0:
            raise ValueError(f"sample_rate must be in (0, 1], got {sample_rate}")
        if full_set and sample_rate != 1.0:
            raise ValueError("a release of the whole private set has sample_rate 1")
        if steps is not None and int(steps) < 1:
            raise ValueError(f"the number of releases must be >= 1, got {steps}")
        self.ledger = ledger
        self.sample_rate = float(sample_rate)
        self.noise_policy = check_policy(noise)
        self.private = not isinstance(noise, NotPrivate)
        self.steps = None if steps is None else int(steps)
        self.relation = neighbouring_relation(ledger.sampling, full_set)
        # the accountant that calibrates this release and stops the run: the ledger's unless overridden
        self.accountant = ledger.calibrating_accountant if accountant is None else accountant
        self.bound = bound
        self.beta = 0.0  # sensitivity failure probability per release (set by subclasses with a random bound)
        self.noise_std = 0.0
        self._multiplier = 0.0
        self._history_steps = 0  # Calibrated(history=True): the ledger's releases the calibration counted
        self._sensitivity: dict[str, float] = {}
        self.releases = 0
        # several processes: rank 0's seed on every rank (the generators draw the same numbers everywhere)
        seed = dist.shared_secret() if seed is None else int(dist.broadcast_object(int(seed)))
        self.device = None if device is None else torch.device(device)  # None: the host
        self.generator = device_generator(seed, self.device)  # the noise
        # directions of a projection release (secret like the noise; drawn by draw_directions)
        self.directions_generator = device_generator((seed + DIRECTIONS_SEED_OFFSET) % 2**63, self.device)

    # -- sensitivity and noise ---------------------------------------------------------
    @abstractmethod
    def sensitivity_under(self, relation: str) -> float:
        """L2 sensitivity of the un-noised release between neighbours of ``relation``."""

    @property
    def sensitivity(self) -> float | None:
        """Sensitivity under the run's relation (``None`` for a non-private mechanism)."""
        if not self.private:
            return None
        if self.relation not in self._sensitivity:  # cached: some bounds solve a 1-D minimisation
            self._sensitivity[self.relation] = self.sensitivity_under(self.relation)
        return self._sensitivity[self.relation]

    @property
    def noise_multiplier(self) -> float:
        """``noise_std / sensitivity`` (what the accountant sees); 0 for a non-private mechanism."""
        return self._multiplier if self.private else 0.0

    @property
    def paper_convention(self) -> bool:
        """A paper's stated sensitivity, not the data's: every release is labelled, never rigorous."""
        return isinstance(self.noise_policy, PaperNoise)

    @property
    def guarantee(self) -> str:
        return guarantee_label(self.private, self.bound, self.paper_convention)

    def _apply_noise_policy(self) -> None:
        """Fix ``noise_std`` and the multiplier from the policy (once, when the mechanism is built)."""
        policy = self.noise_policy
        if isinstance(policy, NotPrivate):
            self.noise_std, self._multiplier = policy.smoothing_std, 0.0
        elif isinstance(policy, Calibrated):
            if self.steps is None:
                raise PrivacySettingError("steps", f"calibrated noise needs the number of planned releases: build the "
                                                   f"{self.kind} mechanism with steps=<releases>")
            past = self.ledger.steps if policy.history else 0
            target = None if policy.epsilon_share == 1.0 else policy.epsilon_share * self.ledger.target_epsilon
            mult = self.ledger.calibrate(self.sample_rate, self.steps, self.beta, accountant=self.accountant,
                                         history=policy.history, epsilon=target) if dist.is_main() else None
            mult = float(dist.broadcast_object(mult))  # several processes: rank 0's ledger calibrates
            self._multiplier, self.noise_std, self._history_steps = mult, mult * self.sensitivity, past
        elif isinstance(policy, FixedMultiplier):
            self._multiplier, self.noise_std = policy.multiplier, policy.multiplier * self.sensitivity
        else:  # FixedStd, PaperNoise: the std is given, the multiplier follows from the (stated) sensitivity
            if getattr(policy, "stated_dim", None) and getattr(self, "_stated_dim", None) != policy.stated_dim:
                raise PrivacySettingError("stated_dim", f"a {self.kind} release has no stated sensitivity dimension")
            self.noise_std = policy.noise_std
            self._multiplier = policy.noise_std / self.sensitivity

    def noise(self, shape: torch.Size | tuple[int, ...], like: torch.Tensor) -> torch.Tensor | None:
        """``N(0, noise_std^2)`` of ``shape`` from this mechanism's generator, drawn on the mechanism's device (the
        run's: where ``like`` lives, so nothing is copied); ``None`` when the std is 0 (nothing drawn)."""
        if self.noise_std <= 0:
            return None
        z = torch.randn(tuple(shape), generator=self.generator, dtype=like.dtype, device=self.device)
        return self.noise_std * (z if z.device == like.device else z.to(like.device))

    def combine(self, parts: list[torch.Tensor], rows: int | None = None) -> list[torch.Tensor]:
        """This process's parts of one release -> the whole batch's, by the kind's declared :attr:`reduce`,
        in ONE collective (every part together); un-noised, inside the process group only.

        ``"sum"``: each part is this rank's sum over its records; the result is the sum over the ranks.
        ``"rows"``: each part holds this rank's rows (``dist.shard_bounds(rows)``) of a ``rows``-row
        tensor; the result is the whole tensor, in rank order (``rows=None``: parts of any sizes, which are
        exchanged first).  ``"none"`` (or one process): ``parts``."""
        if not dist.active() or self.reduce == "none":
            return parts
        if self.reduce == "rows":
            return [dist.all_gather_rows(p) if rows is None else dist.gather_shards(p.detach(), rows) for p in parts]
        flat = dist.all_reduce_sum(torch.cat([p.reshape(-1) for p in parts]))
        return [c.view_as(p) for c, p in zip(flat.split([p.numel() for p in parts]), parts, strict=True)]

    def noised(self, parts: list[torch.Tensor]) -> list[torch.Tensor]:
        """Each part plus ``N(0, noise_std^2)`` on every entry, drawn in order from this mechanism's generator.

        Several processes: ``parts`` are the combined (whole-batch) quantities, the same on every rank, and
        every rank draws the same numbers (its generator is seeded with rank 0's seed and has drawn the same
        shapes), so every rank releases the same tensor with ONE draw of the calibrated noise: the
        single-process release, its sensitivity (one record moves one contribution or one row, wherever it
        is read) and its noise.  (Noising each rank's part before a sum would add W independent draws: a
        variance W times too large.)"""
        return [p if (z := self.noise(p.shape, p)) is None else p + z for p in parts]

    def noised_sum(self, parts: list[torch.Tensor]) -> list[torch.Tensor]:
        """Sums of clipped per-record contributions (this rank's records) -> the whole batch's sums plus
        ``N(0, noise_std^2)`` on every entry: :meth:`combine` (one all-reduce), then :meth:`noised`."""
        return self.noised(self.combine(parts))

    def _record(self) -> None:
        """One release of this mechanism in the ledger (only ``release`` calls it).  Inside a captured step
        (``PrivacyLedger.deferred``) the record is collected and made after each replay (``methods.capture``)."""
        self.ledger.submit(self.ledger_entry(), self._record_now)

    def _record_now(self) -> None:
        self.ledger.record(self.noise_multiplier, self.sample_rate, 1, self.beta if self.private else 0.0,
                           relation=self.relation, mechanism=self.kind, guarantee=self.guarantee)
        self.releases += 1

    def ledger_entry(self) -> LedgerEntry:
        """What one release adds to the ledger (the budget check of the training loop)."""
        return LedgerEntry(self.noise_multiplier, self.sample_rate, 1, self.beta if self.private else 0.0,
                           self.relation, self.kind, self.guarantee)

    # -- persistence and reporting -----------------------------------------------------
    def _config(self) -> dict:
        """What fixes the calibration (compared on resume): the policy, the sensitivity's settings, the std."""
        return {"kind": self.kind, "relation": self.relation, "sample_rate": self.sample_rate,
                "noise": describe_policy(self.noise_policy), "steps": self.steps, "noise_std": self.noise_std,
                "beta": self.beta, **({"history_steps": self._history_steps} if self._history_steps else {})}

    def state_dict(self) -> dict:
        """Generator states for a resume.  Once every planned release is made (a one-shot release: after its one
        step) the noise generator is never drawn from again and its state, from which the noise of the releases
        could be recomputed (and so the exact released statistics), is not kept (``generator: None``)."""
        spent = self.steps is not None and self.releases >= self.steps
        return {**self._config(), "generator": None if spent else generator_state(self.generator),
                "directions_generator": generator_state(self.directions_generator), "releases": self.releases}

    def load_state_dict(self, state: dict) -> None:
        """Restore the generators; refuse a checkpoint whose noise policy or calibration differs from this run's."""
        mine = self._config()
        diff = {k: (state.get(k), v) for k, v in mine.items()
                if not (state.get(k) == v or (isinstance(v, float) and isinstance(state.get(k), float)
                                              and math.isclose(state[k], v, rel_tol=1e-12)))}
        if diff:
            raise ValueError(f"cannot resume: the {self.kind} release was calibrated differently in the checkpoint ("
                             + ", ".join(f"{k}: checkpoint {a!r} vs now {b!r}" for k, (a, b) in diff.items())
                             + "); resume with the same model and accountant settings, under the dpgen version "
                               "that started the run (the git_commit of its results.json: another version's noise "
                               "calibration may differ in the last digits)")
        if state["generator"] is not None:
            resumed_generator(self.generator, state["generator"])  # another device type: reseeded (module docstring)
        else:  # spent (see state_dict): any later draw is fresh secret noise, never a replay of the released one
            self.generator.manual_seed(secrets.randbits(63))
        resumed_generator(self.directions_generator, state["directions_generator"])
        self.releases = int(state["releases"])

    def describe(self) -> dict:
        """For results.json (``train.mechanisms``)."""
        return {"kind": self.kind, "relation": self.relation, "sensitivity": self.sensitivity,
                "noise_std": self.noise_std, "noise_multiplier": self.noise_multiplier,
                "noise_policy": type(self.noise_policy).__name__,
                "sample_rate": self.sample_rate, "beta": self.beta if self.private else 0.0,
                "accountant": self.accountant, "guarantee": self.guarantee,
                "guarantee_note": qualifier(self.guarantee) or None, "releases": self.releases}


# ---------------------------------------------------------------------------------------------
def paper_projection_noise(policy: PaperProjectionNoise, *, dim: int, k: int, delta: float,
                           one_shot: bool) -> PaperNoise:
    """The :class:`PaperNoise` of ``privacy.convention=paper`` for a projection release of ``k`` directions of
    ``dim``-dimensional unit rows: the DPSWflow paper's released code's std (``c S / ε`` once for the whole set,
    ``sigma · 2 sqrt(w_CLT)`` per step), at the stated dimension when the paper states one."""
    d = policy.stated_dim or dim
    if one_shot:
        if policy.epsilon is None:
            raise PrivacySettingError("privacy.convention", "the paper's one-shot release needs its stated epsilon")
        std = paper_one_shot_sigma(policy.epsilon, delta, d, k)
    else:
        if policy.sigma is None:
            raise PrivacySettingError("privacy.convention", "the paper's per-step release needs its stated sigma")
        std = paper_flow_noise_std(policy.sigma, d, k, delta)
    return PaperNoise(std, stated_dim=policy.stated_dim)


class GaussianProjectionRelease(Mechanism):
    """DP-SWD's Gaussian mechanism ``M(X) = X U + V``, ``V_ij ~ N(0, s^2)`` (Rakotomamonjy & Ralaivola, Alg. 1).

    Rows ``X: (B, D)`` come from a map of ``privacy.rows`` with ``||x_i - x'_i|| <= row_diameter``
    (1 for rows of norm <= 1/2, 2 for unit latents); ``U: (D, k)`` has unit columns drawn fresh.
    With probability >= 1 - beta over U, ``||X U - X' U||_F <= row_diameter sqrt(w(k, D, beta))``
    (``privacy.sensitivity``; ``bound`` = bernstein | bernstein_code | chernoff | clt).

    delta split (union bound over the T releases): ``beta = f delta / T`` reserved per release, the
    conversion at ``(1 - f) delta`` (``ledger.calibrate`` subtracts the reservations).

    Relation and partners: under ``replace_one`` the differing pair is fixed (``partners = 1``).  Under
    ``add_remove`` (Poisson) the batch is released at the fixed size B (``rows.fixed_size``): an added
    record replaces a padding row or a *random* kept record, so the bound must hold for all N + 1
    possible partners: it is taken at ``beta / (N + 1)``.

    ``directions="orthogonal"``: U is ``ceil(k/D)`` fresh Haar-random orthonormal D x D blocks
    (``ot.sliced.orthogonal_directions``, drawn by :meth:`draw_directions`), so for ANY difference row v,
    ``||v U||^2 <= ceil(k/D) ||v||^2`` deterministically: sensitivity ``row_diameter * sqrt(ceil(k/D))``
    under both relations, no beta reserved, no partners factor, no probabilistic bound (``bound`` unused).
    """

    kind = "gaussian_projection"
    reduce = "rows"
    release_formula = "`rows @ U + N(0, s^2)`, a fresh U per step"
    used_by = "DP-SWD generator, DPSWflow-r, DPSWgen, domain adaptation `dpswd`"

    def __init__(self, ledger: PrivacyLedger, *, dim: int, num_projections: int, steps: int, sample_rate: float,
                 n_private: int, noise: NoisePolicy, bound: str = "bernstein", sensitivity_fraction: float = 0.5,
                 row_diameter: float = 1.0, seed: int | None = None, full_set: bool = False, directions: str = "random",
                 accountant: str | None = None, device: torch.device | str | None = None) -> None:
        if isinstance(noise, PaperProjectionNoise):  # the released code's std at this release's k, d and delta
            noise = paper_projection_noise(noise, dim=int(dim), k=int(num_projections), delta=ledger.delta,
                                           one_shot=full_set)
        super().__init__(ledger, sample_rate=sample_rate, noise=noise, steps=steps, full_set=full_set, seed=seed,
                         accountant=accountant, bound=bound, device=device)
        check_bound(bound)
        check_directions(directions)
        check_sensitivity_fraction(sensitivity_fraction)
        self.dim, self.k, self.n_private = int(dim), int(num_projections), int(n_private)
        self.row_diameter, self.sensitivity_fraction, self.directions = float(row_diameter), float(
            sensitivity_fraction), directions
        # PaperNoise(stated_dim=...): the dimension a paper's code plugs into the bound (the STATED sensitivity
        # only; the true epsilon keeps self.dim), e.g. the released DPSWgen latent trainer's C·W² = 1024 for 8-d latents
        self._stated_dim: int | None = getattr(self.noise_policy, "stated_dim", None)
        if directions == "orthogonal":
            self.bound = None  # no probabilistic bound: the sensitivity is exact (guarantee: rigorous)
        elif self.private:
            self.beta = self.sensitivity_fraction * ledger.delta / self.steps
            if bound == "clt":
                warnings.warn("bound=clt is an asymptotic approximation, not a rigorous bound: the reported "
                              "(epsilon, delta) is not a DP guarantee (use chernoff or bernstein for one)", stacklevel=3)

    def partners(self, relation: str) -> int:
        """How many difference vectors the bound must hold for at one release (see the class docstring)."""
        return self.n_private + 1 if relation == "add_remove" else 1

    def public_partners(self) -> int | str:
        """``partners`` as results.json may show it: the number under replace-one (N is public), else the
        formula, whose N is the private record count (not published under add/remove)."""
        n = self.partners(self.relation)
        if self.relation != "add_remove" or n == 1:
            return n
        return "2 (N + 1)" if n == 2 * (self.n_private + 1) else "N + 1"

    def sensitivity_under(self, relation: str) -> float:
        if relation not in RELATIONS:
            raise ValueError(f"unknown neighbouring relation {relation!r}")
        if self.directions == "orthogonal":  # deterministic: one row moves by <= row_diameter
            return self.row_diameter * math.sqrt(math.ceil(self.k / self.dim))
        dim = self._stated_dim or self.dim  # the rows' dimension, unless a paper convention states another
        return l2_sensitivity(self.k, dim, self.beta / self.partners(relation), self.bound, self.row_diameter)

    def draw_directions(self, device: torch.device | str | None = None) -> torch.Tensor:
        """Fresh ``U: (D, k)`` of this release's kind from the mechanism's own directions generator (secret,
        checkpointed: a resumed run draws the directions an uninterrupted run would have drawn), drawn on the
        generator's device (the run's) and returned on ``device``; several processes: the same on every rank
        (every rank's generator is seeded with rank 0's seed)."""
        if self.directions == "orthogonal":
            u = orthogonal_directions(self.dim, self.k, generator=self.directions_generator, device=device)
        else:
            u = random_directions(self.dim, self.k, generator=self.directions_generator, device=device)
        return u

    def release(self, rows: torch.Tensor, u: torch.Tensor, part: tuple[int, int] | None = None) -> torch.Tensor:
        """``rows: (B, D)`` (already bounded by a row map), ``u: (D, k)`` -> ``(B, k) = rows @ u + N(0, s^2)``.

        The only way private rows leave: noised, and recorded in the ledger in the same call.

        Several processes: ``rows`` is the whole released batch on every rank (the row maps
        ``privacy.rows.fixed_size`` / ``class_blocks`` gather the ranks' rows first, so the fixed-size
        layout is the single-process one); rank r projects its contiguous part of the rows, the parts are
        gathered (``reduce = "rows"``: one all-gather) and every rank adds the same draw of the whole noise
        matrix, so the released ``(B, k)`` matrix, its sensitivity (one record moves one row) and the
        ledger entry are the single-process ones.  ``part = (lo, hi)``: this rank uses only rows lo..hi of the
        release (its whole class blocks of a data-parallel step), so nothing is gathered: it projects those rows
        and adds rows lo..hi of the whole noise matrix, drawn whole as one process draws it.  The ranks' parts
        together are the single-process release, recorded once.
        """
        if rows.shape[1] != self.dim or u.shape != (self.dim, self.k):
            raise ValueError(f"projection release expects rows (B, {self.dim}) and directions ({self.dim}, {self.k}), "
                             f"got {tuple(rows.shape)} and {tuple(u.shape)}")
        if part is None:
            lo, hi = dist.shard_bounds(rows.shape[0])
            return self.release_shard(rows[lo:hi], u, rows.shape[0])
        lo, hi = part
        out = rows.detach()[lo:hi] @ u
        z = self.noise((rows.shape[0], self.k), out)  # the whole draw: every rank's generator stays in step
        out = out if z is None else out + z[lo:hi]
        self._record()
        return out

    def release_shard(self, own: torch.Tensor, u: torch.Tensor, n: int) -> torch.Tensor:
        """:meth:`release` of an ``n``-row batch from this process's rows of it alone (rows ``dist.shard_bounds(n)``;
        one process: all n): those rows projected, the processes' parts gathered (one all-gather), the one noise
        draw added: the whole single-process release on every rank, recorded once.  A process need not map the
        other processes' rows at all."""
        if own.shape[1] != self.dim or u.shape != (self.dim, self.k):
            raise ValueError(f"projection release expects rows (b, {self.dim}) and directions ({self.dim}, {self.k}), "
                             f"got {tuple(own.shape)} and {tuple(u.shape)}")
        (out,) = self.noised(self.combine([own.detach() @ u], rows=n))
        self._record()
        return out

    def _config(self) -> dict:
        return {**super()._config(), "dim": self.dim, "k": self.k, "bound": self.bound,
                "row_diameter": self.row_diameter, "directions": self.directions}

    def describe(self) -> dict:
        return {**super().describe(), "row_dim": self.dim, "num_projections": self.k,
                "sensitivity_bound": self.bound,  # None with orthogonal directions: the sensitivity is exact
                "row_diameter": self.row_diameter,
                "partners": self.public_partners() if self.private and self.directions == "random" else None,
                "directions": self.directions, "releases_planned": self.steps,
                **({"stated_sensitivity_dim": self._stated_dim} if self._stated_dim else {})}


class OneShotProjectionRelease(GaussianProjectionRelease):
    """DPSWflow (Sebag et al., Algorithm 2): the projections of the WHOLE private set, released once.

    One Gaussian mechanism, no subsampling (sample rate 1), N public: the relation is ``replace_one``
    whatever the sampler of other releases.  Unit latents (row diameter 2), beta = f delta once.
    ``calibration``: ``rdp`` (the ledger's calibrating accountant, ``accountant.calibrate_with``) or
    ``analytic`` (the Gaussian mechanism calibrated by the PLD accountant, tight for one release).

    ``class_blocks=True`` (DPSWflow ``label_mode=partition``): the released matrix is the private
    set split by label into C blocks of a PUBLIC size m (``rows.class_blocks``: a class with more than m
    rows keeps a uniform random subset, one with fewer is padded with the zero row).  Under replace-one,
    (x, y) -> (x', y'): if y = y' one row of block y changes (x -> x', the subsets coupled by position: a
    fixed pair); if y != y', block y loses x (its row becomes a padding zero, or -- block cut -- a random
    other record z of class y takes its place) and block y' gains x' (a padding zero becomes x', or x'
    replaces a random kept record w).  So at most TWO rows change, each by <= ``row_diameter``:

    * orthogonal directions: ``||(X - X')U||_F^2 <= ceil(k/D) (||v_1||^2 + ||v_2||^2)``, sensitivity
      ``sqrt(2) row_diameter sqrt(ceil(k/D))`` deterministically;
    * random directions: the difference rows are among the <= 2 (N + 1) vectors ``x - z``, ``x - 0``,
      ``x' - w``, ``x' - 0``; the probabilistic bound is taken at ``beta / (2 (N + 1))`` (union bound) and
      the sensitivity is ``sqrt(2) * l2_sensitivity(k, D, beta / (2 (N + 1)))``.

    Under add/remove (not the relation of this release, reported for completeness) one row of one block
    changes: no sqrt(2), partners N + 1.
    """

    kind = "one_shot_projection"
    release_formula = "`rows @ U + N(0, s^2)` of the whole private set, once (N public)"
    used_by = "DPSWflow (Algorithm 2)"

    def __init__(self, ledger: PrivacyLedger, *, dim: int, num_projections: int, bound: str = "chernoff",
                 sensitivity_fraction: float = 0.5, calibration: str = "rdp", noise: NoisePolicy,
                 seed: int | None = None, row_diameter: float = 2.0, directions: str = "random",
                 class_blocks: bool = False, n_private: int = 0, device: torch.device | str | None = None) -> None:
        if calibration not in ("rdp", "analytic"):
            raise PrivacySettingError("calibration", f"one-shot calibration {calibration!r} is unknown: choose rdp or "
                                                     "analytic")
        if class_blocks and n_private < 1:
            raise ValueError("a class-block one-shot release needs the (public) private-set size n_private >= 1")
        super().__init__(ledger, dim=dim, num_projections=num_projections, steps=1, sample_rate=1.0,
                         n_private=n_private, bound=bound, sensitivity_fraction=sensitivity_fraction,
                         row_diameter=row_diameter, noise=noise, seed=seed, full_set=True, directions=directions,
                         accountant="pld" if calibration == "analytic" else None, device=device)
        self.calibration = calibration
        self.class_blocks = bool(class_blocks)

    def rows_changed(self, relation: str) -> int:
        """Released rows one neighbour can change: 2 for class blocks under replace-one, else 1."""
        return 2 if self.class_blocks and relation == "replace_one" else 1

    def partners(self, relation: str) -> int:
        """Difference vectors the probabilistic bound must cover (see the class docstring)."""
        if not self.class_blocks:
            return 1  # the whole set in a fixed order: the differing pair is fixed
        return self.rows_changed(relation) * (self.n_private + 1)

    def sensitivity_under(self, relation: str) -> float:
        if relation not in RELATIONS:
            raise ValueError(f"unknown neighbouring relation {relation!r}")
        return math.sqrt(self.rows_changed(relation)) * super().sensitivity_under(relation)

    def _config(self) -> dict:
        return {**super()._config(), "class_blocks": self.class_blocks, "n_private": self.n_private}


class ImageGradientSanitiser(Mechanism):
    """DP-Sinkhorn's release (Cao et al. 2021, DP-Sinkhorn paper, gradient sanitisation): ``G~ = clip_C(G) + N(0, (2 C sigma)^2 I)``.

    ``G: (n, ...)`` is the gradient of the Sinkhorn loss w.r.t. the n generated images; it depends on
    the whole private batch through the transport plan.  Non-finite entries are set to 0 first (a
    data-independent choice; the clip then still bounds the tensor), so the release is always a
    Gaussian mechanism and the training never branches on an un-noised private quantity.

    * ``clip="whole"`` (the released code): the tensor in the Frobenius C-ball: any change of the
      batch (add, remove or replace a record) moves it by <= 2C: sensitivity 2C, multiplier sigma.
    * ``clip="per_row"`` (the paper's Alg. 1): each of the n rows in the C-ball and every row
      depends on every record: sensitivity 2C sqrt(n), multiplier sigma / sqrt(n) (Thm. 4.1).

    The paper's sigma fixed is the policy ``FixedStd(2 C sigma)``; ``Calibrated()`` finds the multiplier.

    Several processes: G is not a sum over records (the transport plan couples the whole batch), so
    every rank reads the whole global batch (``PrivateSampler(split=False)``), computes the same G, and
    every rank adds the same draw of the noise to the clipped G (``reduce = "none"``): the single-process
    release, with nothing crossing the processes.
    """

    kind = "image_gradient"
    release_formula = "`clip_C(G) + N(0, (2 C sigma)^2)`, G the loss gradient w.r.t. the generated images"
    used_by = "DP-Sinkhorn"

    def __init__(self, ledger: PrivacyLedger, *, clip_norm: float, n_rows: int, sample_rate: float,
                 noise: NoisePolicy, steps: int | None = None, clip: str = "whole", seed: int | None = None,
                 device: torch.device | str | None = None) -> None:
        super().__init__(ledger, sample_rate=sample_rate, noise=noise, steps=steps, seed=seed, device=device)
        if clip not in CLIP_MODES:
            raise PrivacySettingError("clip", f"clip mode {clip!r} is unknown; choose one of {CLIP_MODES}")
        if clip_norm <= 0:
            raise PrivacySettingError("clip_norm", f"the clip norm C must be > 0, got {clip_norm}")
        self.clip_norm, self.n_rows, self.clip = float(clip_norm), int(n_rows), clip

    def sensitivity_under(self, relation: str) -> float:
        if relation not in RELATIONS:
            raise ValueError(f"unknown neighbouring relation {relation!r}")
        # the clipped tensor lies in a ball of radius C (per row: n balls) whatever the batch
        return 2.0 * self.clip_norm * (1.0 if self.clip == "whole" else math.sqrt(self.n_rows))

    @property
    def sigma(self) -> float:
        """The paper's sigma: noise std = 2 C sigma."""
        return self.noise_std / (2.0 * self.clip_norm)

    def release(self, g: torch.Tensor) -> torch.Tensor:
        """``g: (n, ...)`` -> ``clip(g) + N(0, (2 C sigma)^2)``, recorded; a non-private run passes ``g`` through."""
        if self.private:
            # non-finite entries -> 0 (a public rule; unconditional: testing first would be a host sync per step)
            g = torch.nan_to_num(g, nan=0.0, posinf=0.0, neginf=0.0)
            g = clip_whole(g, self.clip_norm) if self.clip == "whole" else clip_per_row(g, self.clip_norm)
            (g,) = self.noised([g])  # several processes: every rank has g and draws the same noise
        self._record()
        return g

    def _config(self) -> dict:
        return {**super()._config(), "clip": self.clip, "clip_norm": self.clip_norm, "n_rows": self.n_rows}

    def describe(self) -> dict:
        return {**super().describe(), "clip": self.clip, "clip_norm": self.clip_norm, "sigma": self.sigma}


class NoisyGradientSum(Mechanism):
    """DP-SGD's release (Abadi et al. 2016, Alg. 1 lines 6-7; DP-DANN and the DP-SGD classifier).

    ``per-sample gradients g_i -> g~_i = g_i / max(1, ||g_i|| / C)`` (joint L2 norm over every
    tensor) ``-> sum_i g~_i + N(0, noise_std^2 I) -> / (q N)`` with the PUBLIC expected batch size
    q N (never the realised, private one).  The clipping happens inside ``release``, so the bound is
    enforced, not assumed.  Sensitivity of the clipped sum (``sum_sensitivity``): C under add/remove
    (Poisson), 2C under replace-one (sampling without replacement), so noise_std = multiplier * C or
    multiplier * 2C.

    In few operations: ``release`` takes the per-sample gradients in chunks (memory), each as ONE flat
    ``(b, D)`` tensor (``privacy.per_sample.FlatGrads``; a dict ``{name: (b, *shape)}`` is flattened first) or as
    its norms and a weighted-sum function (``privacy.per_sample.GhostGrads``, ``model.per_sample=ghost``):
    one norm per sample over all D entries, the clip factors ``min(1, C / ||g_i||)`` once, one weighted sum
    into a flat ``(D,)`` total; then ONE draw of ``N(0, noise_std^2 I_D)`` from
    the mechanism's own generator (:meth:`noised_sum` on the flat vector), split back into the parameters'
    shapes.  The law is unchanged: i.i.d. ``N(0, noise_std^2)`` on every entry of the clipped sum, whose L2
    sensitivity is the one above whatever the grouping of the entries (the joint norm was always over all of
    them); only the order in which the generator's numbers land on the entries differs from one draw per tensor.
    """

    kind = "noisy_gradient_sum"
    reduce = "sum"
    release_formula = "`(sum_i clip_C(g_i) + N(0, s^2)) / (q N)`"
    used_by = "DP-SGD classifier, domain adaptation `dp_dann`"

    def __init__(self, ledger: PrivacyLedger, *, clip_norm: float, sample_rate: float, expected_batch_size: float,
                 noise: NoisePolicy, steps: int | None = None, seed: int | None = None,
                 device: torch.device | str | None = None) -> None:
        super().__init__(ledger, sample_rate=sample_rate, noise=noise, steps=steps, seed=seed, device=device)
        if not clip_norm > 0:
            raise ValueError(f"the clip norm C must be > 0, got {clip_norm}")
        if not expected_batch_size > 0:
            raise ValueError(f"the expected batch size q N must be > 0, got {expected_batch_size}")
        self.clip_norm, self.expected_batch_size = float(clip_norm), float(expected_batch_size)

    def sensitivity_under(self, relation: str) -> float:
        return sum_sensitivity(self.clip_norm, relation)

    def noised_sum(self, parts: list[torch.Tensor]) -> list[torch.Tensor]:
        """The parts as ONE flat vector: summed over the ranks (one all-reduce), one noise draw over all of it."""
        if len(parts) == 1 and parts[0].dim() == 1:
            return super().noised_sum(parts)
        (noisy,) = super().noised_sum([torch.cat([p.reshape(-1) for p in parts])])
        return [c.view_as(p) for c, p in zip(noisy.split([p.numel() for p in parts]), parts, strict=True)]

    def release(self, per_sample: Iterable[FlatGrads | GhostGrads | dict[str, torch.Tensor]],
                observe: Callable[[FlatGrads | GhostGrads, torch.Tensor], None] | None = None) -> dict[str, torch.Tensor]:
        """``per_sample``: chunks of per-sample gradients (at least one chunk, possibly with b = 0) ->
        ``{name: shape}`` = (sum of clipped + noise) / (q N), recorded.

        A chunk gives its ``(b,)`` per-sample norms (``norms()``) and, given the clip factors, its weighted sum
        ``sum_i scale_i g_i`` as one ``(D,)`` vector (``weighted_sum(scale)``): a ``FlatGrads`` from its ``(b, D)``
        rows, a ``GhostGrads`` (``model.per_sample=ghost``) from the layers' inputs and backprops without forming
        the rows.  Either way the clip factors are this method's, the clipped sum the same, the noise drawn once.

        ``observe(chunk, scale)`` sees each chunk and its ``(b,)`` clip factors (the clipped rows are
        ``chunk.rows(k) * scale[:k, None]``; only for the opt-in data-dependent reports of the DP-SGD classifier:
        nothing of them leaves through the release)."""
        total: torch.Tensor | None = None
        layout = None
        for chunk in per_sample:
            if isinstance(chunk, dict):
                chunk = FlatGrads(Layout.of_grads(chunk).flatten(chunk), Layout.of_grads(chunk))
            layout = chunk.layout
            norms = chunk.norms()                                                   # ||g_i||, all D entries jointly
            scale = clip_scale(norms, self.clip_norm).to(norms.dtype)               # line 6: min(1, C / ||g_i||)
            if observe is not None:
                observe(chunk, scale)
            part = chunk.weighted_sum(scale)                                        # sum_i g~_i: (D,)
            total = part if total is None else total.add_(part)
        if total is None:
            raise ValueError("release() needs at least one chunk of per-sample gradients (it may be empty)")
        # line 7: noise on the SUM (several processes: summed over the ranks, noised once; noised_sum)
        (noisy,) = self.noised_sum([total])
        out = layout.views(noisy / self.expected_batch_size)                        # / public q N
        self._record()
        return out

    def _config(self) -> dict:
        return {**super()._config(), "clip_norm": self.clip_norm, "expected_batch_size": self.expected_batch_size}

    def describe(self) -> dict:
        return {**super().describe(), "clip_norm": self.clip_norm, "expected_batch_size": self.expected_batch_size}


class UnnoisedAccess(Mechanism):
    """A non-private baseline's use of a private batch (SWD / DANN alignment, plain SGD): nothing is
    added, the access is recorded with noise multiplier 0, so the run reports epsilon = infinity."""

    kind = "unnoised_access"
    release_formula = "nothing added, recorded with noise multiplier 0 (epsilon = infinity)"
    used_by = "the non-private baselines"

    def __init__(self, ledger: PrivacyLedger, *, sample_rate: float) -> None:
        super().__init__(ledger, sample_rate=sample_rate, noise=NotPrivate(), seed=0)

    def sensitivity_under(self, relation: str) -> float:
        return math.inf

    def release(self) -> None:
        """Record one un-noised access (the caller then uses the batch as it is)."""
        self._record()

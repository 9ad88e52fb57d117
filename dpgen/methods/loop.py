"""THE training loop of every method (the only place with checkpoints, a progress bar and the budget stop).

``train(method, data, ledger, ctx)`` runs six phases, each a function of this module:

1. ``_resume``: load ``ctx.resume_from`` (a damaged file is one error line naming it; its method state is
   handed to ``setup`` as ``ctx.resume_state``);
2. warm-up (a warm-started method only, ``methods.warm_start``): ``_warm_release`` — the moment release and
   its ledger entry, before ``method.setup(data, ledger, ctx)`` builds models, sampler and calibrated
   mechanisms (no release) — then ``_warm_up`` (post-processing of the release, checkpointed);
3. ``_restore``: a resume checks the signature, then restores ledger (refuses a changed accountant.epsilon /
   delta / sampling), method state, mechanism noise generators, sampler and RNG;
4. ``_plan``: the planned length, or as many steps as the budget allows; at most ``ctx.max_steps``;
5. ``_steps``: for t in [start, end):
   budget check (``Budget``) — the ledger's allowance for the mechanisms step t will release (cached: one
   accountant call when the rest of the plan fits) — stop before the target would be exceeded;
   ``values = method.step(t)`` — every private release happens in here, through a mechanism that
   records itself; a resume never re-releases a finished step; with ``ctx.graph`` (``trainer.graph``) the step
   runs through ``capture.StepRunner``: warm-up steps, one capture, then a replay per step, each replay's
   releases recorded once after it (the values are then the graph's static outputs);
   non-finite check on ``values`` (public or released quantities only; never an un-noised loss):
   python floats at once, tensors on the device without a host sync (the first bad step is kept
   on the device and raised at the next log / checkpoint step);
   ``_log`` cadence (values + epsilon, the calibrating accountant's + opt-in reported accountants; no timings:
   they depend on the private batch sizes): the values are copied to the host without blocking
   (``PendingLog``) and written once the next step has been queued (at a checkpoint step, at once);
   atomic checkpoint cadence; progress bar;
6. ``_publish``: final checkpoint (a failed write is one error line, the previous checkpoint intact); the
   weights-only release artefact ``ctx.run_dir / method.release_name`` (``method.release_state()`` + the
   signature); ``method.finish(ctx)``.

``train`` returns the training summary (steps, budget stop, time, every mechanism's ``describe()``,
``method.train_summary()``).

Host syncs: ``step`` may return 0-d tensors (e.g. ``loss.detach()``); the loop copies them to the
host only at the log cadence (a non-blocking copy, read after the next step is queued: the device is
never left idle by a log) and at the end, so a step on an accelerator never waits for the device
(``tests/runs/test_device.py`` counts the syncs per step).

Checkpoint ``checkpoints/last.pt`` = {step, signature, method, ledger, mechanisms, sampler, rng, public_generator,
values}: it
holds RNG states and is as sensitive as the data; the release artefact is what may be published.

Several processes (``torchrun``, ``dpgen.utils.dist``): every rank runs this loop on the same global
batches (the sampler gives each its part) and releases the same tensors (the mechanisms reduce, noise
once and gather), so every rank takes every step and computes the same update.  After ``setup`` (and a
resume) rank 0's state — models, optimisers, sampler, noise generators, RNG — is copied to every rank,
so the ranks start identical whatever they seeded; from there every rank draws the same public
randomness (generator inputs, directions, public batches) from identically seeded generators, with no
exchange between steps; the budget allowance is rank 0's.  Only rank 0 logs
and writes (checkpoints, the release artefact, ``finish``): one run folder, one ledger.  Its checkpoint
holds the single-process state, so a run resumes on any number of processes.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch
from rich.console import Console

from ..config import privacy_setting_error
from ..data import DataSplits
from ..errors import ConfigError
from ..logging.progress import progress_bar
from ..privacy import PrivacyLedger
from ..privacy.card import public_signature
from ..privacy.errors import PrivacySettingError
from ..privacy.mechanisms import Mechanism
from ..privacy.sampler import generator_state, resumed_generator
from ..runs import read_checkpoint, write_atomically
from ..utils import dist, rng_state, set_rng_state
from .base import Method, NonFiniteLossError, TrainContext, check_signature, public_generator
from .capture import StepRunner


class Budget:
    """The per-step budget check: may step t release these mechanisms without exceeding the target?

    The ledger's allowance for the pattern of releases (one per mechanism) is computed once and
    counted down; it is recomputed when the pattern changes (e.g. after warm-up steps).
    """

    def __init__(self, ledger: PrivacyLedger) -> None:
        self.ledger = ledger
        self.key: tuple | None = None
        self.left = 0

    def allowance(self, mechs: list[Mechanism], at_most: int | None) -> int:
        private = [m for m in mechs if m.private]
        if not private or self.ledger.target_epsilon is None:
            return 2**62 if at_most is None else at_most
        kinds = {m.accountant for m in private}  # the accountant(s) that calibrated these releases
        accountant = kinds.pop() if len(kinds) == 1 else self.ledger.calibrating_accountant
        allowed = (self.ledger.allowance_for([m.ledger_entry() for m in private], accountant, at_most)
                   if dist.is_main() else None)
        return int(dist.broadcast_object(allowed))  # several processes: rank 0's ledger decides

    def allows(self, mechs: list[Mechanism], remaining: int) -> bool:
        private = tuple(m.ledger_entry() for m in mechs if m.private)
        if not private or self.ledger.target_epsilon is None:
            return True
        if private != self.key:
            self.key, self.left = private, self.allowance(mechs, remaining)
        return self.left >= 1

    def spent(self, mechs: list[Mechanism]) -> None:
        if any(m.private for m in mechs) and self.key is not None:
            self.left -= 1


def _check_finite(values: dict, step: int) -> None:
    for k, v in values.items():
        if isinstance(v, float) and not math.isfinite(v):
            raise NonFiniteLossError(step, k)


def host_values(values: dict) -> dict:
    """``values`` with every tensor copied to the host as a float (or list): the one sync, at log cadence."""
    return {k: (v.item() if v.numel() == 1 else v.tolist()) if isinstance(v, torch.Tensor) else v
            for k, v in values.items()}


class FiniteWatch:
    """Non-finite check of tensor values without a host sync per step.

    For every tensor value the first step at which it was NaN/inf is kept as a device tensor
    (``torch.where``, no sync); ``check()`` (log / checkpoint cadence) reads them and raises.
    """

    def __init__(self) -> None:
        self.first_bad: dict[str, torch.Tensor] = {}

    def update(self, values: dict, step: int) -> None:
        for k, v in values.items():
            if not isinstance(v, torch.Tensor) or not v.is_floating_point():
                continue
            bad = ~torch.isfinite(v.detach()).all()
            prev = self.first_bad.get(k)
            if prev is None:
                prev = torch.full((), -1, dtype=torch.long, device=v.device)
            self.first_bad[k] = torch.where(bad & (prev < 0), step, prev)

    def check(self) -> None:
        if not self.first_bad:
            return
        keys = list(self.first_bad)
        steps = torch.stack([self.first_bad[k].cpu() for k in keys]).tolist()
        bad = [(s, k) for s, k in zip(steps, keys, strict=True) if s >= 0]
        if bad:
            raise NonFiniteLossError(*min(bad))


class PendingLog:
    """A log row in flight: the values and the first non-finite steps of a log step, copied to the host with
    ``non_blocking=True`` (an event recorded after the copies on an accelerator), and epsilon, computed at once
    (host arithmetic on the ledger as it stands after the step).  ``write`` waits for the copies, raises a
    non-finite value, and logs the row: the loop calls it after the next step has been queued, so the device
    keeps working while the copies land."""

    def __init__(self, values: dict, done: int, watch: FiniteWatch, ledger: PrivacyLedger) -> None:
        self.done, self.eps = done, ledger.epsilon()  # the calibrating accountant's: it set the noise and stops the run
        self.accountant = ledger.calibrating_accountant.upper()
        # reported-only accountants exist only on the accountant.data_dependent_reports opt-in
        self.reported = {f"epsilon_{k}_reported_only": a.epsilon(ledger.delta) for k, a in ledger.reported.items()}
        tensors = [v for v in [*values.values(), *watch.first_bad.values()] if isinstance(v, torch.Tensor)]
        self.values = {k: v.detach().to("cpu", non_blocking=True) if isinstance(v, torch.Tensor) else v
                       for k, v in values.items()}
        self.first_bad = {k: v.to("cpu", non_blocking=True) for k, v in watch.first_bad.items()}
        device = next((t.device for t in tensors if t.device.type != "cpu"), None)
        self.event = None
        if device is not None:
            self.event = torch.Event(device=device)
            self.event.record()

    def write(self, method: Method, ctx: TrainContext, bar, task) -> None:
        """The row (values + epsilon; no timings: they depend on the private batch sizes), once the copies landed."""
        if self.event is not None:
            self.event.synchronize()
        bad = [(int(s), k) for k, s in self.first_bad.items() if int(s) >= 0]
        if bad:
            raise NonFiniteLossError(*min(bad))
        shown = host_values(self.values)
        ctx.logger.log_metrics({**shown, "epsilon": self.eps, **self.reported}, step=self.done)  # no timings: private
        bar.update(task, info=f"{method.progress_info(shown)}  eps({self.accountant}) {self.eps:.3f}")


def _to_cpu(obj):
    """A state (nested dicts / lists of tensors) with every tensor on the CPU (what ranks exchange)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_cpu(v) for v in obj)
    return obj


def _same_state_as_rank0(method: Method) -> None:
    """Several processes: copy rank 0's training state (models, optimisers, sampler, noise generators,
    RNG) to every rank, as if each had resumed from rank 0's checkpoint: the ranks start identical."""
    if not dist.active():
        return
    state = {"method": method.state_dict(), "rng": rng_state(), "public_generator": generator_state(method.rng),
             "sampler": None if method.sampler is None else method.sampler.state_dict(),
             "mechanisms": {k: m.state_dict() for k, m in method.mechanisms.items()}}
    state = dist.broadcast_object(_to_cpu(state) if dist.is_main() else None)
    if dist.is_main():
        return
    method.load_state_dict(state["method"])
    for name, mech in method.mechanisms.items():
        mech.load_state_dict(state["mechanisms"][name])
    if method.sampler is not None:
        method.sampler.load_state_dict(state["sampler"])
    set_rng_state(state["rng"])
    resumed_generator(method.rng, state["public_generator"])


def _checkpoint(method: Method, ledger: PrivacyLedger, signature: dict, step: int, values: dict,
                ctx: TrainContext) -> None:
    """Atomic; a failed write (disk full) is one error line and leaves the previous checkpoint intact.
    ``values``: the last step's loggable values (so a run resumed at its end reports what it would have).
    Several processes: rank 0 writes (every rank holds the same state)."""
    if not dist.is_main():
        return
    warm = getattr(method, "warm_start", None)
    write_atomically({"step": step, "signature": signature, "method": method.state_dict(),
                      **({"warm_start": warm.state_dict()} if warm is not None else {}),
                      "ledger": ledger.state_dict(), "mechanisms": {k: m.state_dict() for k, m in method.mechanisms.items()},
                      "sampler": None if method.sampler is None else method.sampler.state_dict(), "rng": rng_state(),
                      "public_generator": generator_state(method.rng),
                      "values": host_values(values), "processes": dist.world_size()}, ctx.checkpoint_path)


@dataclass
class _Plan:
    """Where the steps start and end: ``budget_end`` is set when the end is the budget's (no planned length)."""
    start: int
    end: int
    planned: int | None
    budget_end: int | None


def _resume(method: Method, ctx: TrainContext) -> dict | None:
    """Phase 1: the checkpoint to continue from (``ctx.resume_from``), or None; its method state goes to
    ``setup`` as ``ctx.resume_state``.  A weights-only release is refused with one error line."""
    method.mechanisms = {}
    if ctx.resume_from is None:
        return None
    ck = read_checkpoint(ctx.resume_from)
    if "ledger" not in ck:
        raise ConfigError(f"trainer.resume={ctx.resume_from} is a weights-only release, not a checkpoint: it has no "
                          "ledger, so training cannot continue from it; resume from the run folder "
                          "(trainer.resume=true with hydra.run.dir=<run folder>) or <run>/checkpoints/last.pt")
    ctx.resume_state = ck.get("method")
    return ck


def _warm_release(warm, ck: dict | None, data: DataSplits, ledger: PrivacyLedger, ctx: TrainContext) -> None:
    """Phase 2a (a warm-started method, ``methods.warm_start``): the moment release and its ledger entry,
    before ``setup`` calibrates the rest; saved at once.  A resume restores them (no release)."""
    if ck is not None and "warm_start" in ck:
        warm.restore(ck["warm_start"], data, ledger, ctx)  # the release and the phase-1 ledger, no release
        if "method" not in ck:  # killed before the warm-up ended: set up and warm up as the run would have
            set_rng_state(ck["rng"])
        return
    warm.release(data, ledger, ctx)  # THE moment release (recorded), then saved at once
    if dist.is_main():  # several processes: rank 0 writes
        write_atomically({"step": 0, "warm_start": warm.state_dict(), "ledger": ledger.state_dict(),
                          "rng": rng_state()}, ctx.checkpoint_path)
        Console(stderr=True).log(phase_one_line(warm, ledger))


def _warm_up(method: Method, warm, ledger: PrivacyLedger, signature: dict, ctx: TrainContext) -> None:
    """Phase 2b: fit the method to the release (post-processing only, with a progress bar), then checkpoint it
    (phase 2).  The console says what phase 2 releases (its mechanisms, calibrated for what phase 1 left)."""
    if dist.is_main():
        Console(stderr=True).log(phase_two_line(method.mechanisms, ledger))
    if warm.phase < 2:
        with progress_bar("warm-up fit (post-processing of phase 1)", enabled=ctx.progress, transient=True) as bar:
            task = bar.add_task("warm-up", total=warm.steps, info="")
            warm.warm_up(method.warm_target(), ctx.seed, progress=lambda i: bar.update(task, completed=i))
        _checkpoint(method, ledger, signature, 0, {}, ctx)


def _restore(method: Method, ledger: PrivacyLedger, ck: dict | None, signature: dict) -> int:
    """Phase 3: a resume checks the signature, then restores ledger (refusing a changed accountant.epsilon /
    delta / sampling), method, mechanism noise generators, sampler and RNG.  Returns the first step to run."""
    if ck is None or "method" not in ck:  # nothing to resume, or a phase-1 checkpoint (nothing of the method's)
        return 0
    check_signature(ck.get("signature", {}), signature)
    try:
        ledger.load_state_dict(ck["ledger"])
    except PrivacySettingError as err:  # a changed accountant setting: the user's to fix, named by its key
        raise privacy_setting_error(err) from None
    except ValueError as err:
        raise ConfigError(str(err)) from None
    method.load_state_dict(ck["method"])
    missing = set(method.mechanisms) - set(ck.get("mechanisms", {}))
    if missing:
        raise ValueError(f"cannot resume: the checkpoint has no state for the mechanisms {sorted(missing)}")
    for name, mech in method.mechanisms.items():
        mech.load_state_dict(ck["mechanisms"][name])
    if method.sampler is not None:
        method.sampler.load_state_dict(ck["sampler"])
    set_rng_state(ck["rng"])
    if "public_generator" in ck:
        resumed_generator(method.rng, ck["public_generator"])
    return int(ck["step"])


def fresh_noise(method: Method) -> None:
    """A branch (``trainer.fresh_noise=true``): the secret generators a resumed run draws from (each mechanism's
    noise and directions, the private sampler's batches and sizes, the step's public generator) and torch's global RNG reseeded from OS entropy
    (rank 0's on every rank), after the checkpoint restored them.  Two branches of one checkpoint then draw
    independent batches and noise from its step on; the ledger the checkpoint restored (what the run spent up to
    it, e.g. a warm start's moment release) is carried over, so each branch's ε accounts for the shared part."""
    # every generator a step draws from (methods.capture registers the same list), and the sampler's size draw
    for gen in [*method.generators(), *([] if method.sampler is None else [method.sampler.size_generator])]:
        gen.manual_seed(dist.shared_secret())
    torch.manual_seed(dist.shared_secret())


def _plan(method: Method, budget: Budget, start: int, ctx: TrainContext) -> _Plan:
    """Phase 4: the method's planned length, or (none planned) as many steps as the budget allows; at most
    ``ctx.max_steps``."""
    planned = method.total_steps
    if planned is None:  # train until the budget is spent
        end = budget_end = start + budget.allowance(method.step_mechanisms(start), None)
    else:
        end, budget_end = planned, None
    if ctx.max_steps is not None:
        end = min(end, int(ctx.max_steps))
    return _Plan(start, end, planned, budget_end)


def _steps(method: Method, ledger: PrivacyLedger, budget: Budget, plan: _Plan, values: dict, signature: dict,
           ctx: TrainContext, clock: dict, runner: StepRunner) -> tuple[int, dict, bool]:
    """Phase 5: steps ``plan.start .. plan.end`` (budget check, step, finite check, log and checkpoint
    cadence).  Returns (steps done, the last step's values, stopped by the budget).  ``clock`` receives the wall
    seconds of the steady steps: from the end of the first step (lazy state, the budget's accountant evaluation)
    to the end of the last (``steady_time_s``, a private timing; a fresh run's steady steps are all but the first)."""
    done, stopped, watch, first_end = plan.start, False, FiniteWatch(), None
    pending: PendingLog | None = None  # the last log step's row, in flight to the host
    bar = progress_bar(method.name, enabled=ctx.progress, transient=True)  # it times private steps: never logged
    with bar:
        task = bar.add_task("train", total=plan.end, completed=plan.start, info="")

        def write_pending() -> None:  # the last log step's row, if one is in flight: written, once
            nonlocal pending
            if pending is not None:
                row, pending = pending, None
                row.write(method, ctx, bar, task)

        for t in range(plan.start, plan.end):
            mechs = method.step_mechanisms(t)
            if not budget.allows(mechs, plan.end - t):
                stopped = True
                break
            values = runner.run(t)  # method.step(t), or a replay of its captured graph (methods.capture)
            budget.spent(mechs)
            write_pending()  # the previous log step's row: step t is queued, the copies have had its time
            _check_finite(values, t)
            watch.update(values, t)
            done = t + 1
            if (done % ctx.log_every == 0 or done == plan.end) and dist.is_main():
                pending = PendingLog(values, done, watch, ledger)
            if done % ctx.checkpoint_every == 0:
                write_pending()  # the row before the checkpoint: a resume from it never logs this step again
                watch.check()  # never checkpoint weights trained on a NaN
                _checkpoint(method, ledger, signature, done, values, ctx)
            bar.update(task, completed=done)
            if t == plan.start:
                first_end = time.time()
        if first_end is not None:
            clock["steady_time_s"] = time.time() - first_end
        write_pending()
    if plan.budget_end is not None and done == plan.budget_end and any(m.private for m in method.step_mechanisms(done)):
        stopped = True  # the run was planned to end at the budget
    watch.check()
    return done, host_values(values), stopped


def _publish(method: Method, ledger: PrivacyLedger, signature: dict, done: int, values: dict,
             ctx: TrainContext) -> None:
    """Phase 6: the final checkpoint, the weights-only release artefact (+ the signature), ``method.finish``.
    Several processes: rank 0 writes (one release artefact, one run folder)."""
    _checkpoint(method, ledger, signature, done, values, ctx)
    if not dist.is_main():
        return
    extra = ctx.release_extra(ledger) if ctx.release_extra is not None else {}
    write_atomically({**method.release_state(), "signature": public_signature(signature, ledger.relation), **extra},
                     ctx.run_dir / method.release_name)
    method.finish(ctx)


def phase_one_line(warm, ledger: PrivacyLedger) -> str:
    """A warm start's console line of phase 1 (``ledger``: right after the moment release, nothing else in it)."""
    m, acct = warm.method.mech, ledger.calibrating_accountant
    return (f"warm start, phase 1: one {m.kind} release (the DP class-Gaussian's moments), noise multiplier "
            f"{m.noise_multiplier:.4g} (std {m.noise_std:.4g}), ε {ledger.epsilon():.4g} alone ({acct.upper()}; "
            f"share {warm.share:g} of ε = {ledger.target_epsilon:g}); the warm-up reads this release only")

def phase_two_line(mechanisms: dict, ledger: PrivacyLedger) -> str:
    """A warm start's console line of phase 2: the method's mechanisms, calibrated for what phase 1 left."""
    noise = ", ".join(f"{m.kind} noise multiplier {m.noise_multiplier:.4g}" for m in mechanisms.values() if m.private)
    return (f"warm start, phase 2: {noise or 'no private mechanism'}; both phases compose to ε ≤ "
            f"{ledger.target_epsilon:g} ({ledger.calibrating_accountant.upper()}), each phase's ε in the results")


def train(method: Method, data: DataSplits, ledger: PrivacyLedger, ctx: TrainContext) -> dict:
    """Run ``method`` to its planned end, the budget stop or ``ctx.max_steps``, in the phases of the module
    docstring: ``_resume`` -> ``_warm_release`` -> setup -> ``_warm_up`` -> ``_restore`` -> ``_plan`` ->
    ``_steps`` -> ``_publish``."""
    ck = _resume(method, ctx)
    ctx.processes = dist.processes(resumed_from=None if ck is None else ck.get("processes"))
    warm = getattr(method, "warm_start", None)  # methods.warm_start: phase 1 and its ledger come before setup
    if warm is not None:
        _warm_release(warm, ck, data, ledger, ctx)
    method.rng = public_generator(ctx)  # the step's public randomness (codes, labels, smoothing noise), checkpointed
    method.setup(data, ledger, ctx)  # mechanisms calibrated for what the ledger's history leaves
    signature = {"method": type(method).__name__, **method.signature()}
    if warm is not None:
        signature["warm_start"] = warm.signature()
        _warm_up(method, warm, ledger, signature, ctx)
    start = _restore(method, ledger, ck, signature)
    branch = ctx.fresh_noise and ck is not None
    if branch:
        fresh_noise(method)
    _same_state_as_rank0(method)
    ctx.logger.rewind(start)  # metrics.csv: each step once, whatever a killed run logged after the checkpoint
    budget = Budget(ledger)
    plan = _plan(method, budget, start, ctx)
    t0, clock = time.time(), {}
    values = {} if ck is None or "method" not in ck else ck.get("values", {})  # a run resumed at its end reports them
    runner = StepRunner(method, ledger, ctx)  # a resumed run captures again
    done, values, stopped = _steps(method, ledger, budget, plan, values, signature, ctx, clock, runner)
    _publish(method, ledger, signature, done, values, ctx)
    return {"train_steps": done, "steps_planned": plan.planned, "stopped_by_budget": stopped,
            "train_time_s": time.time() - t0, **clock,
            **{f"train_{k}": v for k, v in values.items()},  # last step's public / released values
            "mechanisms": {k: m.describe() for k, m in method.mechanisms.items()}, "processes": ctx.processes,
            **({} if warm is None else {"mechanisms_warm_start": {"moments": warm.method.mech.describe()}}),
            **({} if runner.backend is None and runner.failed is None else runner.summary()),
            **method.train_summary(), **({} if warm is None else warm.train_summary()),
            # a branch: the step it continued from, with fresh secret noise (the ledger includes what came before)
            **({"branched_at_step": start, "fresh_noise": True} if branch else {})}

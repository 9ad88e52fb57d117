"""THE training loop of every method (the only place with checkpoints, a progress bar and the budget stop).

``train(method, data, ledger, ctx)``:

1. resume: load ``ctx.resume_from`` (a damaged file is one error line naming it; its method state is handed to ``setup`` as ``ctx.resume_state``);
2. ``method.setup(data, ledger, ctx)``: models, sampler, calibrated mechanisms (no release);
3. resume: check the signature, then restore ledger (refuses a changed accountant.epsilon / delta /
   sampling), method state, mechanism noise generators, sampler and RNG;
4. for t in [start, end):
   budget check — the ledger's allowance for the mechanisms step t will release (cached: one
   accountant call when the rest of the plan fits) — stop before the target would be exceeded;
   ``values = method.step(t)`` — every private release happens in here, through a mechanism that
   records itself; a resume never re-releases a finished step;
   non-finite check on ``values`` (public or released quantities only; never an un-noised loss):
   python floats at once, tensors on the device without a host sync (the first bad step is kept
   on the device and raised at the next log / checkpoint step);
   log cadence (values + epsilon, the calibrating accountant's + opt-in reported accountants; no timings:
   they depend on the private batch sizes); atomic checkpoint cadence; progress bar;
5. final checkpoint (a failed write is one error line, the previous checkpoint intact); the weights-only release artefact ``ctx.run_dir / method.release_name``
   (``method.release_state()`` + the signature); ``method.finish(ctx)``;
6. returns the training summary (steps, budget stop, time, every mechanism's ``describe()``,
   ``method.train_summary()``).

Host syncs: ``step`` may return 0-d tensors (e.g. ``loss.detach()``); the loop copies them to the
host only at the log cadence and at the end, so a step on an accelerator never waits for the device
(``tests/runs/test_device.py`` counts the syncs per step).

Checkpoint ``checkpoints/last.pt`` = {step, signature, method, ledger, mechanisms, sampler, rng, values}: it
holds RNG states and is as sensitive as the data; the release artefact is what may be published.

Several processes (``torchrun``, ``dpgen.utils.dist``): every rank runs this loop on the same global
batches (the sampler gives each its part) and releases the same tensors (the mechanisms reduce, noise
once and gather), so every rank takes every step and computes the same update.  After ``setup`` (and a
resume) rank 0's state — models, optimisers, sampler, noise generators, RNG — is copied to every rank,
so the ranks start identical whatever they seeded; the budget allowance is rank 0's.  Only rank 0 logs
and writes (checkpoints, the release artefact, ``finish``): one run folder, one ledger.  Its checkpoint
holds the single-process state, so a run resumes on any number of processes.
"""

from __future__ import annotations

import math
import time

import torch
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from ..config import privacy_setting_error
from ..data import DataSplits
from ..errors import ConfigError
from ..privacy import PrivacyLedger, distributed
from ..privacy.card import public_signature
from ..privacy.errors import PrivacySettingError
from ..privacy.mechanisms import Mechanism
from ..runs import read_checkpoint, write_atomically
from ..utils import atomic_save, rng_state, set_rng_state
from .base import Method, NonFiniteLossError, TrainContext, check_signature


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
                   if distributed.is_main() else None)
        return int(distributed.broadcast_object(allowed))  # several processes: rank 0's ledger decides

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


def progress_bar(name: str, ctx: TrainContext, transient: bool = False) -> Progress:
    """The progress bar of the loop (also used for a method's PUBLIC pre-training, e.g. DPSWflow's AE)."""
    return Progress(TextColumn(f"[bold]{name}[/] " + "{task.completed}/{task.total}"), BarColumn(),
                    TextColumn("{task.fields[info]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                    disable=not ctx.progress, transient=transient)


def save_public_artifact(obj: dict, path) -> None:
    """Atomic write of a PUBLIC artefact outside the checkpoint (e.g. an autoencoder trained on public data only)."""
    atomic_save(obj, path)


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
    if not distributed.active():
        return
    state = {"method": method.state_dict(), "rng": rng_state(),
             "sampler": None if method.sampler is None else method.sampler.state_dict(),
             "mechanisms": {k: m.state_dict() for k, m in method.mechanisms.items()}}
    state = distributed.broadcast_object(_to_cpu(state) if distributed.is_main() else None)
    if distributed.is_main():
        return
    method.load_state_dict(state["method"])
    for name, mech in method.mechanisms.items():
        mech.load_state_dict(state["mechanisms"][name])
    if method.sampler is not None:
        method.sampler.load_state_dict(state["sampler"])
    set_rng_state(state["rng"])


def _same_rng_as_rank0() -> None:
    """Several processes: rank 0's global RNG state on every rank (after a step whose private part drew
    from it in proportion to the rank's part of the batch, e.g. dropout masks of per-sample gradients),
    so the next step's public draws (generator inputs, directions, public batches) are the same everywhere."""
    if distributed.active():
        set_rng_state(distributed.broadcast_object(rng_state() if distributed.is_main() else None))


def _checkpoint(method: Method, ledger: PrivacyLedger, signature: dict, step: int, values: dict,
                ctx: TrainContext) -> None:
    """Atomic; a failed write (disk full) is one error line and leaves the previous checkpoint intact.
    ``values``: the last step's loggable values (so a run resumed at its end reports what it would have).
    Several processes: rank 0 writes (every rank holds the same state)."""
    if not distributed.is_main():
        return
    warm = getattr(method, "warm_start", None)
    write_atomically({"step": step, "signature": signature, "method": method.state_dict(),
                      **({"warm_start": warm.state_dict()} if warm is not None else {}),
                      "ledger": ledger.state_dict(), "mechanisms": {k: m.state_dict() for k, m in method.mechanisms.items()},
                      "sampler": None if method.sampler is None else method.sampler.state_dict(), "rng": rng_state(),
                      "values": host_values(values)}, ctx.checkpoint_path)


def train(method: Method, data: DataSplits, ledger: PrivacyLedger, ctx: TrainContext) -> dict:
    """Run ``method`` to its planned end, the budget stop or ``ctx.max_steps``; see the module docstring."""
    ck = None
    if ctx.resume_from is not None:
        ck = read_checkpoint(ctx.resume_from)
        if "ledger" not in ck:
            raise ConfigError(f"trainer.resume={ctx.resume_from} is a weights-only release, not a checkpoint: it has no "
                              "ledger, so training cannot continue from it; resume from the run folder "
                              "(trainer.resume=true with hydra.run.dir=<run folder>) or <run>/checkpoints/last.pt")
        ctx.resume_state = ck.get("method")
    method.mechanisms = {}
    warm = getattr(method, "warm_start", None)  # methods.warm_start: phase 1 and its ledger come before setup
    if warm is not None:
        if ck is not None and "warm_start" in ck:
            warm.restore(ck["warm_start"], data, ledger, ctx)  # the release and the phase-1 ledger, no release
            if "method" not in ck:  # killed before the warm-up ended: set up and warm up as the run would have
                set_rng_state(ck["rng"])
        else:
            warm.release(data, ledger, ctx)                     # THE moment release (recorded), then saved at once
            if distributed.is_main():  # several processes: rank 0 writes
                write_atomically({"step": 0, "warm_start": warm.state_dict(), "ledger": ledger.state_dict(),
                                  "rng": rng_state()}, ctx.checkpoint_path)
                Console(stderr=True).log(warm.phase_one_line(ledger))
    method.setup(data, ledger, ctx)  # mechanisms calibrated for what the ledger's history leaves
    signature = {"method": type(method).__name__, **method.signature()}
    if warm is not None:
        signature["warm_start"] = warm.signature()
        if distributed.is_main():
            Console(stderr=True).log(warm.phase_two_line(method.mechanisms, ledger))
        if warm.phase < 2:  # post-processing of the release only; then checkpointed (phase 2)
            with progress_bar("warm-up fit (post-processing of phase 1)", ctx, transient=True) as bar:
                task = bar.add_task("warm-up", total=warm.steps, info="")
                warm.warm_up(method.warm_target(), ctx.seed, progress=lambda i: bar.update(task, completed=i))
            _checkpoint(method, ledger, signature, 0, {}, ctx)
            ck = None if ck is None or "method" not in ck else ck
    if ck is not None and "method" not in ck:  # a phase-1 checkpoint: nothing of the method's to restore
        ck = None
    start = 0
    if ck is not None:
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
        start = int(ck["step"])
    _same_state_as_rank0(method)
    ctx.logger.rewind(start)  # metrics.csv: each step once, whatever a killed run logged after the checkpoint

    budget = Budget(ledger)
    planned = method.total_steps
    if planned is None:  # train until the budget is spent
        end = start + budget.allowance(method.step_mechanisms(start), None)
        budget_end = end
    else:
        end, budget_end = planned, None
    if ctx.max_steps is not None:
        end = min(end, int(ctx.max_steps))

    t0, done, values, stopped = time.time(), start, ({} if ck is None else ck.get("values", {})), False
    watch = FiniteWatch()
    bar = progress_bar(method.name, ctx, transient=True)  # its clock times private steps: never left in a log
    with bar:
        task = bar.add_task("train", total=end, completed=start, info="")
        for t in range(start, end):
            mechs = method.step_mechanisms(t)
            if not budget.allows(mechs, end - t):
                stopped = True
                break
            values = method.step(t)
            _same_rng_as_rank0()
            budget.spent(mechs)
            _check_finite(values, t)
            watch.update(values, t)
            done = t + 1
            if (done % ctx.log_every == 0 or done == end) and distributed.is_main():
                watch.check()
                shown = host_values(values)
                eps = ledger.epsilon()  # the calibrating accountant's: the one that set the noise and stops the run
                # reported-only accountants exist only on the accountant.data_dependent_reports opt-in
                reported = {f"epsilon_{k}_reported_only": a.epsilon(ledger.delta) for k, a in ledger.reported.items()}
                ctx.logger.log_metrics({**shown, "epsilon": eps, **reported}, step=done)  # no timings: private
                bar.update(task, info=f"{method.progress_info(shown)}  eps({ledger.calibrating_accountant.upper()}) {eps:.3f}")
            if done % ctx.checkpoint_every == 0:
                watch.check()  # never checkpoint weights trained on a NaN
                _checkpoint(method, ledger, signature, done, values, ctx)
            bar.update(task, completed=done)
    if budget_end is not None and done == budget_end and any(m.private for m in method.step_mechanisms(done)):
        stopped = True  # the run was planned to end at the budget
    watch.check()
    values = host_values(values)
    _checkpoint(method, ledger, signature, done, values, ctx)
    extra = ctx.release_extra(ledger) if ctx.release_extra is not None and distributed.is_main() else {}
    if distributed.is_main():  # one release artefact, one run folder
        write_atomically({**method.release_state(), "signature": public_signature(signature, ledger.relation), **extra},
                         ctx.run_dir / method.release_name)
        method.finish(ctx)
    return {"train_steps": done, "steps_planned": planned, "stopped_by_budget": stopped,
            "train_time_s": time.time() - t0,
            **{f"train_{k}": v for k, v in values.items()},  # last step's public / released values
            "mechanisms": {k: m.describe() for k, m in method.mechanisms.items()},
            **({} if warm is None else {"mechanisms_warm_start": {"moments": warm.method.mech.describe()}}),
            **method.train_summary(), **({} if warm is None else warm.train_summary())}

"""CPU threads of a run (``trainer.threads``), applied before any torch work.

The models of these presets are tiny (a few hundred thousand parameters, batches of ~100 rows):
torch's intra-op threads gain nothing on them, and on a shared machine (a laptop, a CI runner, a node
running a joblib sweep) its default of one spinning thread per core oversubscribes the CPU — a
2-core ``make train`` beside one other CPU job took 16 min instead of 45 s.  So:

* ``threads: 1`` (the default): one intra-op and one inter-op thread;
* ``threads: auto``: ``cores // jobs`` where ``jobs`` is the number of runs a Hydra joblib sweep
  executes at once (1 outside a sweep), at least 1, at most 4 (more never pays off for these sizes);
* ``threads: <n>``: exactly n.

The value is also written to ``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS`` / ``OPENBLAS_NUM_THREADS``
so subprocesses (dataloader workers, joblib workers, evaluator scripts) inherit it, and set on the BLAS
and OpenMP pools this process has already loaded (``threadpoolctl``: numpy's OpenBLAS, which
scikit-learn's LogReg and MLP use, would otherwise start one spinning thread per core).
"""

from __future__ import annotations

import os

THREAD_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
AUTO_MAX_THREADS = 4


def available_cores() -> int:
    """Cores this process may run on (the affinity mask, e.g. a container's cpuset), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def concurrent_jobs() -> int:
    """How many runs of this Hydra multirun execute at once (joblib ``n_jobs``; 1 otherwise)."""
    try:
        from hydra.core.hydra_config import HydraConfig

        if not HydraConfig.initialized():
            return 1
        hc = HydraConfig.get()
        if str(hc.mode) != "RunMode.MULTIRUN":
            return 1
        n_jobs = hc.launcher.get("n_jobs") if "launcher" in hc else None
    except Exception:  # noqa: BLE001 - no Hydra context: a plain run
        return 1
    if n_jobs is None:
        return 1
    n_jobs = int(n_jobs)
    cores = available_cores()
    if n_jobs < 0:  # joblib: -1 = all cores, -2 = all but one, ...
        n_jobs = max(1, cores + 1 + n_jobs)
    return max(1, n_jobs)


def resolve_threads(threads: int | str | None, cores: int | None = None, jobs: int | None = None) -> int:
    """The number of torch threads for ``trainer.threads`` (see the module docstring)."""
    if threads is None or (isinstance(threads, str) and threads.strip().lower() == "auto"):
        cores = available_cores() if cores is None else cores
        jobs = concurrent_jobs() if jobs is None else jobs
        return max(1, min(AUTO_MAX_THREADS, cores // max(1, jobs)))
    try:
        n = int(threads)
    except (TypeError, ValueError):
        n = 0
    if n < 1 or (isinstance(threads, float) and threads != n):
        raise ValueError(f"trainer.threads={threads!r}: use a positive integer (e.g. trainer.threads=1, the "
                         "default for these small models) or trainer.threads=auto")
    return n


def apply_threads(threads: int | str | None) -> int:
    """Set torch's intra-/inter-op threads and the OMP/MKL environment; returns the thread count.

    ``torch.set_num_interop_threads`` may be called only before the first inter-op parallel work of
    the process; a later call (e.g. a second run in one test process) keeps the earlier value.
    """
    n = resolve_threads(threads)
    for var in THREAD_ENV_VARS:
        os.environ[var] = str(n)
    import torch
    from threadpoolctl import threadpool_limits

    threadpool_limits(n)  # BLAS pools already loaded (numpy's OpenBLAS: scikit-learn's fits) read no variable now

    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    if torch.get_num_interop_threads() != n:
        try:
            torch.set_num_interop_threads(n)
        except RuntimeError:
            pass  # inter-op pool already started in this process: only its size stays as it was
    return n

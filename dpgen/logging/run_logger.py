"""One small logging interface with a local and a W&B sink.

Only aggregate metrics, synthetic samples and public data are ever passed to a logger: the
methods never hand it a private record (see the privacy boundary in docs/ARCHITECTURE.md).

A run folder is one run, also across restarts (``trainer.resume``): ``metrics.csv`` is appended
to and cut back to the checkpoint's step on a resume (``rewind``: each step once), the W&B run id is kept in ``wandb_run_id`` and resumed, and ``private_timings.json`` records the
wall time of every segment so that the run time covers them all.

Wall-clock timings of a private run (run time, training time, steps/s) depend on the private
(Poisson) batch sizes, so they are an un-noised function of private data: they never go to
``results.json``, ``metrics.csv``, W&B or the console.  ``private_timings.json`` in the run folder
holds them, for the operator only (mode 0600; like ``checkpoints/``, it is not to be published).
W&B receives the run once training has ended (:class:`WandbSink`), so its own time stamps time nothing
private.
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import ConfigError
from ..utils import json_safe
from .summary import group_results, metric_family
from .timings import LEGACY_RUNTIME_FILE, PRIVATE_NOTE, PRIVATE_TIMINGS, write_private
from .wandb_checks import NOT_LOGGED_IN, WANDB_MODES, check_wandb, wandb_logged_in, wandb_mode  # noqa: F401

EPSILON_KEY = "epsilon"  # the x axis of the W&B charts: the calibrating accountant's ε spent (the run's ε)
WANDB_ID_FILE = "wandb_run_id"



def to_uint8_image(grid: torch.Tensor) -> np.ndarray:
    """``grid: (C, H, W)`` floats in [0, 1] -> ``(H, W)`` (C = 1) or ``(H, W, C)`` uint8 in [0, 255].

    ``wandb.Image`` casts float arrays to uint8 without scaling, which turns [0, 1] pixels into
    0/1 (a black grid); handing it uint8 pixels avoids that.
    """
    if grid.dim() != 3:
        raise ValueError(f"expected one (C, H, W) image grid, got shape {tuple(grid.shape)}")
    pixels = (grid.detach().float().cpu().clamp(0, 1) * 255.0).round().to(torch.uint8)
    arr = pixels.permute(1, 2, 0).numpy()
    return arr[:, :, 0] if arr.shape[2] == 1 else arr


def image_grid(images: torch.Tensor, nrow: int = 10, padding: int = 2, pad_value: float = 1.0) -> torch.Tensor:
    """``images: (n, C, H, W)`` -> one ``(3 or C, H', W')`` grid, ``nrow`` images per row, ``padding`` pixels of
    ``pad_value`` around each; grey images become three equal channels.  The same grid (pixel for pixel) as
    ``torchvision.utils.make_grid`` with these arguments, without importing torchvision (seconds of start-up
    that a run on the 8x8 digits would spend on nothing else)."""
    if images.dim() == 3:
        images = images.unsqueeze(0)
    if images.shape[1] == 1:
        images = images.expand(-1, 3, -1, -1)
    n, c, h, w = images.shape
    if n == 1:
        return images[0].clone()
    cols = min(nrow, n)
    rows = -(-n // cols)
    grid = images.new_full((c, rows * (h + padding) + padding, cols * (w + padding) + padding), pad_value)
    for k in range(n):
        y, x = divmod(k, cols)
        top, left = y * (h + padding) + padding, x * (w + padding) + padding
        grid[:, top:top + h, left:left + w] = images[k]
    return grid


def save_png(images: torch.Tensor, path: str | Path, nrow: int = 10) -> None:
    """Write ``images: (n, C, H, W)`` in [0, 1] as one PNG grid (:func:`image_grid`), pixels rounded to uint8."""
    from PIL import Image

    grid = image_grid(images.detach().float().cpu().clamp(0, 1), nrow=nrow)
    pixels = grid.mul(255).add_(0.5).clamp_(0, 255).permute(1, 2, 0).to(torch.uint8).numpy()
    Image.fromarray(pixels).save(path)


def wandb_location(run) -> str | None:
    """The console's line naming where a W&B run is: its URL online; offline, its folder and the command that
    uploads it (``wandb sync <folder>``)."""
    url = getattr(run, "url", None)
    if url:
        return f"W&B: the run is at {url}"
    folder = getattr(getattr(run, "settings", None), "sync_dir", None)
    if folder:
        return f"W&B (offline): the run is in {folder}; upload it with `wandb sync {folder}`"
    return None


class LocalSink:
    """Writes ``metrics.csv``, image grids (``<name>.png``) and ``results.json`` into the run folder.

    ``metrics.csv`` is appended to, one line per call (linear in the number of rows); only when a
    new column appears is the file rewritten once with the wider header.  ``append=True`` continues
    an existing file (a resumed run), ``append=False`` starts a new one.
    """

    def __init__(self, run_dir: str | Path, append: bool = True) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._csv = self.run_dir / "metrics.csv"
        self._fields: list[str] = []
        if append and self._csv.exists():  # resumed run: keep the history, continue its header
            with open(self._csv, newline="") as fh:
                header = next(csv.reader(fh), None)
            self._fields = list(header or [])
        elif self._csv.exists():
            self._csv.unlink()

    @property
    def fields(self) -> list[str]:
        return list(self._fields)

    def log_metrics(self, metrics: dict[str, Any], step: int) -> None:
        row = {"step": step, **metrics}
        new = [k for k in row if k not in self._fields]
        if new or not self._csv.exists():
            self._widen(new)
        with open(self._csv, "a", newline="") as fh:
            csv.DictWriter(fh, fieldnames=self._fields).writerow(row)

    def rewind(self, step: int) -> None:
        """Drop the rows after ``step`` (a resume from the checkpoint at ``step``: the steps a killed run
        logged after it are trained again) and a last line cut short by the kill; atomic rewrite."""
        if not self._csv.exists() or not self._fields:
            return
        text = self._csv.read_text()
        lines = text.splitlines(keepends=True)
        if lines and not lines[-1].endswith("\n"):
            lines = lines[:-1]  # a row the killed run never finished writing
        rows = list(csv.DictReader(io.StringIO("".join(lines))))
        kept = [r for r in rows if _step_of(r) is not None and _step_of(r) <= step]
        if len(kept) == len(rows) and len(lines) == len(text.splitlines(keepends=True)):
            return
        self._rewrite(kept)

    def _widen(self, new: list[str]) -> None:
        """Rewrite the file once with ``new`` columns added (old rows get empty cells)."""
        rows: list[dict] = []
        if self._csv.exists() and self._fields:
            with open(self._csv, newline="") as fh:
                rows = list(csv.DictReader(fh))
        self._fields = self._fields + new
        self._rewrite(rows)

    def _rewrite(self, rows: list[dict]) -> None:
        """Replace the file by the header and ``rows`` (temp file + rename: a kill leaves the old or the new file)."""
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=self._fields)
        writer.writeheader()
        writer.writerows(rows)
        tmp = self._csv.with_suffix(".csv.tmp")
        tmp.write_text(buf.getvalue())
        os.replace(tmp, self._csv)

    def log_images(self, name: str, images: torch.Tensor, step: int | None = None, nrow: int = 10) -> Path:
        path = self.run_dir / f"{name}.png"
        save_png(images, path, nrow=nrow)
        return path

    def log_summary(self, results: dict[str, Any]) -> Path:
        path = self.run_dir / "results.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(json_safe(results), indent=2, sort_keys=True))
        os.replace(tmp, path)
        return path

    def open_after_training(self) -> None:
        pass  # the local files are written as the run goes

    def finish(self) -> None:
        pass


def _step_of(row: dict) -> int | None:
    try:
        return int(row.get("step") or "")
    except ValueError:
        return None


def _hydra_group_and_name(experiment: str | None) -> tuple[str | None, str | None]:
    """In a Hydra multirun: (``<experiment>/<sweep folder>``, ``<job overrides>``) so the jobs of one
    sweep form one W&B group; else (experiment, None)."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode
    except ImportError:  # pragma: no cover - hydra is a dependency
        return experiment, None
    if not HydraConfig.initialized():
        return experiment, None
    hc = HydraConfig.get()
    if hc.mode != RunMode.MULTIRUN:
        return experiment, None
    sweep = Path(str(hc.sweep.dir)).name
    job = hc.job.override_dirname or str(hc.job.num)
    return f"{experiment or hc.job.name}/{sweep}", job


class WandbSink:
    """Weights & Biases run: config, metrics, the ε-spent curve, synthetic grids, grouped summary.

    **Opened after training, not during it.**  W&B stamps every logged row with its wall-clock time
    (``_timestamp``, ``_runtime``) and samples system metrics while a run is open: during training
    those are the step timings of a private run, which depend on the private batch sizes.  So the
    sink only records what it is given until the private part of the run is over:

    * ``open_after_training()`` (the pipeline calls it once training has ended, before the evaluation)
      starts, on a background thread, W&B's import and service (``wandb.setup()``), opens the W&B run and
      sends the rows of ``metrics.csv`` (the whole history of the run folder, each step once, also across
      resumed segments), every row stamped with one and the same ``_timestamp``, system metrics off.  Its
      clock then times only the evaluation, a post-processing of the release on synthetic and public data,
      which runs meanwhile;
    * ``finish()`` (the end of the run, also after an error) waits for that thread, or does the same itself
      when training never ended (an interrupted or failed run), sends the image grids, the summary and any
      later row, and closes the run.  Its ``_runtime`` is the evaluation's and the upload's duration.

    * every logged metric is charted against ``epsilon`` (the calibrating accountant's ε spent;
      ``define_metric(step_metric=...)``), and ``epsilon`` itself against the step (the ε-spent curve);
    * at the end the utility metrics are logged once at the final ε (``eval/<metric>``), so a
      sweep's runs give one point each on a chart keyed by ε;
    * the jobs of a Hydra multirun share one group (``group: null``);
    * ``resume_id``: continue that W&B run (a resumed run folder whose earlier segment was sent)
      instead of starting a new one; the id is written to ``wandb_run_id`` when the run is opened.
    * nothing recorded (a run refused before its first logged step): no W&B run at all.
    """

    def __init__(self, run_dir: str | Path, config: dict, mode: str = "offline", project: str = "dpgen",
                 entity: str | None = None, group: str | None = None, name: str | None = None,
                 tags: list[str] | None = None, resume_id: str | None = None) -> None:
        self.mode = wandb_mode(mode)
        auto_group, auto_name = _hydra_group_and_name(config.get("experiment_name"))
        self.run_dir, self.config = Path(run_dir), config
        self._init = {"project": project, "entity": entity, "group": group or auto_group, "name": name or auto_name,
                      "tags": tags}
        self.resumed = resume_id is not None
        self.run_id = resume_id or new_wandb_id()
        self._rows: dict[int, dict] = {}  # step -> metrics of this segment (metrics.csv is read when the run opens)
        self._sent: set[int] = set()  # steps already sent
        self._images: list[tuple[str, np.ndarray, str, int | None]] = []
        self._summary: dict | None = None
        self.run = None
        self._opener: threading.Thread | None = None
        self._open_error: BaseException | None = None
        self._finished = False

    def log_metrics(self, metrics: dict[str, Any], step: int) -> None:
        self._rows.setdefault(int(step), {}).update({k: v for k, v in metrics.items() if v is not None})

    def log_images(self, name: str, images: torch.Tensor, step: int | None = None, nrow: int = 10) -> None:
        grid = image_grid(images.detach().float().cpu().clamp(0, 1), nrow=nrow)
        key = f"samples/{name.removeprefix('samples_')}" if name.startswith("samples_") else name
        self._images.append((key, to_uint8_image(grid), name, step))

    def log_summary(self, results: dict[str, Any]) -> None:
        self._summary = results

    def open_after_training(self) -> None:
        """Training has ended: open the W&B run and send its history on a background thread (once)."""
        if self._opener is None and self.mode != "disabled" and self._rows:
            self._opener = threading.Thread(target=self._open_in_background, name="dpgen-wandb", daemon=True)
            self._opener.start()

    def _open_in_background(self) -> None:
        try:
            self._open()
        except BaseException as e:  # noqa: BLE001 - raised by finish(), in the main thread
            self._open_error = e

    def _open(self) -> None:
        """Open the W&B run and send the rows recorded so far."""
        import wandb

        (self.run_dir / WANDB_ID_FILE).write_text(self.run_id + "\n")
        try:
            self.run = wandb.init(**self._init, mode=self.mode, dir=str(self.run_dir), config=self.config,
                                  reinit="finish_previous", id=self.run_id, resume="allow" if self.resumed else None,
                                  settings=wandb.Settings(silent=True, console="off", x_disable_stats=True))
        except wandb.errors.UsageError as err:  # a login check_wandb could not see coming
            if "api key" not in str(err).lower():
                raise
            raise ConfigError(NOT_LOGGED_IN) from None
        self._wandb, self._defined, self._stamp = wandb, set(), float(time.time())
        self.run.define_metric(EPSILON_KEY, summary="max")
        self._first = int(getattr(self.run, "starting_step", 0) or 0) if self.resumed else 0  # rows W&B already has
        self._send_rows({**read_metrics_csv(self.run_dir / "metrics.csv"), **dict(self._rows)})

    def _send_rows(self, rows: dict[int, dict]) -> None:
        for step in sorted(s for s in rows if s >= self._first and s not in self._sent):
            self._log(rows[step], step)
            self._sent.add(step)

    def finish(self) -> None:
        """Send everything recorded (opening the run first if training never ended) and close it (once)."""
        if self._finished or not (self._rows or self._images or self._summary is not None):
            return
        self._finished = True
        if self._opener is not None:
            self._opener.join()
            self._opener = None
            if self._open_error is not None:
                raise self._open_error
        else:
            self._open()
        self._send_rows(self._rows)
        for key, arr, caption, step in self._images:
            self._log({key: self._wandb.Image(arr, caption=caption)},
                      step if step is not None and step >= self._first else None)
        if self._summary is not None:
            self._send_summary(self._summary)
        where = wandb_location(self.run)
        self.run.finish()
        if where:
            print(where, file=sys.stderr, flush=True)

    def _log(self, row: dict, step: int | None) -> None:
        eps = row.get(EPSILON_KEY)
        if isinstance(eps, (int, float)) and np.isfinite(eps):  # non-private runs (ε = ∞) chart by step
            self._define(row)
        self.run.log({**row, "_timestamp": self._stamp}, **({"step": step} if step is not None else {}))

    def _define(self, keys) -> None:
        for key in keys:
            if key not in self._defined and key != EPSILON_KEY:
                self.run.define_metric(key, step_metric=EPSILON_KEY)
                self._defined.add(key)

    def _send_summary(self, results: dict[str, Any]) -> None:
        safe = json_safe(results)
        grouped = safe.get("summary") or json_safe(group_results(results))
        eps = (results.get("privacy") or {}).get(EPSILON_KEY)
        points = {f"eval/{k}": float(v) for k, v in (results.get("metrics") or {}).items()
                  if metric_family(k, v) is not None and isinstance(v, (int, float)) and not isinstance(v, bool)}
        if points and isinstance(eps, (int, float)) and np.isfinite(eps):
            self._log({**points, EPSILON_KEY: float(eps)}, None)
        for k, v in _flatten(grouped).items():
            self.run.summary[k] = v
        for key in ("experiment", "dataset"):
            if key in safe:
                self.run.summary[key] = safe[key]


def new_wandb_id() -> str:
    """A fresh W&B run id (8 characters of [a-z0-9], W&B's own form)."""
    import secrets
    import string

    return "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))


def read_metrics_csv(path: Path) -> dict[int, dict]:
    """``metrics.csv`` as {step: {column: value}}: numbers as floats, empty cells dropped."""
    if not path.is_file():
        return {}
    rows: dict[int, dict] = {}
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            step = _step_of(row)
            if step is None:
                continue
            rows[step] = {k: _number(v) for k, v in row.items() if k != "step" and k is not None and v not in ("", None)}
    return rows


def _number(text: str):
    try:
        return float(text)
    except ValueError:
        return text


def split_private_timings(results: dict[str, Any]) -> tuple[dict, dict]:
    """(a copy of ``results`` without wall-clock timings, the timings): ``runtime_s``,
    ``runtime_segments_s`` and every ``*_time_s`` of ``train`` (the training time depends on the private
    batch sizes) and of ``metrics`` (the evaluation's).  The copy is what results.json and W&B receive."""
    public = {k: v for k, v in results.items() if k not in ("runtime_s", "runtime_segments_s")}
    timings = {k: results[k] for k in ("runtime_s", "runtime_segments_s") if k in results}
    for group in ("train", "metrics"):
        values = results.get(group)
        if isinstance(values, dict):
            public[group] = {k: v for k, v in values.items() if not k.endswith("_time_s")}
            timings.update({f"{group}.{k}": v for k, v in values.items() if k.endswith("_time_s")})
    return public, timings


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "/"))
        else:
            out[key] = v
    return out


def _resume_source(resume, run_dir: Path) -> Path | None:
    """The run folder a resumed run continues (``trainer.resume``: true -> this folder; a folder or
    a checkpoint path -> that run's folder); None for a fresh run."""
    if resume in (False, None, "false"):
        return None
    if resume in (True, "true", "auto"):  # auto: dpgen/runs.py has cleared a folder this run does not continue
        return run_dir
    p = Path(str(resume))
    if p.is_file():  # <run>/checkpoints/last.pt
        return p.parent.parent if p.parent.name == "checkpoints" else p.parent
    return p


class RunLogger:
    """Fans every call out to the local sink and, when configured, W&B.

    ``run_config`` is the resolved run config (W&B config; its ``trainer.resume`` says whether this
    is a continued run).  Without it (unit tests, benches) an existing ``metrics.csv`` is continued.
    """

    def __init__(self, run_dir: str | Path, run_config: dict | None = None, wandb: dict | None = None) -> None:
        self.run_dir = Path(run_dir)
        self._t0 = time.time()
        resume = ((run_config or {}).get("trainer") or {}).get("resume", True) if run_config is not None else True
        source = _resume_source(resume, self.run_dir)
        self.resumed = source is not None
        self.local = LocalSink(run_dir, append=self.resumed)
        self._previous_segments = self._read_segments(source) if source is not None else []
        self._timings: dict[str, float] = {}
        self.sinks: list[Any] = [self.local]
        if wandb:
            resume_id = None
            id_file = source / WANDB_ID_FILE if source is not None else None
            if id_file is not None and id_file.is_file():
                resume_id = id_file.read_text().strip() or None
            self.sinks.append(WandbSink(run_dir, run_config or {}, resume_id=resume_id, **wandb))

    # -- run time over restarts (private) -------------------------------------------------
    @staticmethod
    def _read_segments(folder: Path) -> list[float]:
        for name in (PRIVATE_TIMINGS, LEGACY_RUNTIME_FILE):
            path = folder / name
            if path.is_file():
                try:
                    return [float(s) for s in json.loads(path.read_text()).get("segments_s", [])]
                except (OSError, ValueError, AttributeError):
                    return []
        return []

    def _write_segments(self, current: float, extra: dict | None = None) -> list[float]:
        """Write ``private_timings.json``: every segment's wall time (+ ``extra`` timings); the segments."""
        segments = [*self._previous_segments, float(current)]
        self._timings.update(extra or {})
        write_private(self.run_dir / PRIVATE_TIMINGS, json.dumps(
            {"note": PRIVATE_NOTE, "segments_s": segments, "runtime_s": float(sum(segments)), **self._timings}, indent=2))
        return segments

    # -- the interface ---------------------------------------------------------------------
    def log_metrics(self, metrics: dict[str, Any], step: int) -> None:
        for s in self.sinks:
            s.log_metrics(metrics, step)
        self._write_segments(time.time() - self._t0)  # an interrupted segment still counts on resume

    def rewind(self, step: int) -> None:
        """The training loop starts at ``step`` (0: fresh): ``metrics.csv`` keeps only the rows up to it.

        W&B keeps the rows of a resumed run it already has (it ignores steps logged twice)."""
        self.local.rewind(step)

    def log_images(self, name: str, images: torch.Tensor, step: int | None = None, nrow: int = 10) -> None:
        """Synthetic or public images only.  Small images (e.g. 8x8 digits) are enlarged for viewing."""
        if images.dim() == 4 and images.shape[-1] < 32:
            scale = -(-32 // images.shape[-1])
            images = torch.nn.functional.interpolate(images.float(), scale_factor=scale, mode="nearest")
        for s in self.sinks:
            s.log_images(name, images, step, nrow)

    def log_summary(self, results: dict[str, Any]) -> None:
        """Write the results everywhere, without the private timings (they go to ``private_timings.json``).

        Completes ``results`` in place first (the caller's copy, e.g. for the console): ``runtime_s``
        becomes the sum over all segments of this run folder (``runtime_segments_s`` lists them) and
        ``summary`` holds the privacy | utility | provenance grouping of what is published."""
        current = float(results.get("runtime_s", time.time() - self._t0))
        public, timings = split_private_timings(results)
        segments = self._write_segments(current, {k: v for k, v in timings.items() if "." in k})
        if len(segments) > 1:
            results["runtime_segments_s"] = segments
            results["runtime_s"] = float(sum(segments))
        public["summary"] = results["summary"] = group_results(public)
        for s in self.sinks:
            s.log_summary(public)

    def open_after_training(self) -> None:
        """Training has ended: the remote sinks may open their run now (W&B: on a background thread, while the
        run evaluates; see :class:`WandbSink`)."""
        for s in self.sinks:
            s.open_after_training()

    def local_only(self) -> None:
        """Drop the remote sinks (an interrupted run: its W&B run is sent by the run that completes the folder)."""
        self.sinks = [self.local]

    def finish(self) -> None:
        for s in self.sinks:
            s.finish()


class SilentLogger:
    """The logger of a run's other processes (ranks > 0 of a ``torchrun`` run): rank 0 writes, they record nothing."""

    resumed = False

    def log_metrics(self, metrics: dict[str, Any], step: int) -> None: ...

    def rewind(self, step: int) -> None: ...

    def log_images(self, name: str, images: torch.Tensor, step: int | None = None, nrow: int = 10) -> None: ...

    def log_summary(self, results: dict[str, Any]) -> None: ...

    def finish(self) -> None: ...

    def open_after_training(self) -> None: ...

    def local_only(self) -> None: ...

"""Target accuracy of a domain-adaptation method (the metric of DP-SWD Table 1).

Reads only the *test* splits (the target test set, and the source test set when the dataset has
one).  The private target training records are evaluated on only under the transductive protocol
(``dataset.test_fraction=0`` with ``dataset.allow_transductive_eval=true``); the numbers are then
labelled ``acc_target_note`` = "computed on private records — not covered by ε".  Writes ``confusion_target.png``
(row-normalised confusion matrix on the target test set) into the run folder.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from .evaluator import check_test_split

TRANSDUCTIVE_NOTE = "computed on private records — not covered by ε"


class DomainAdaptationEvaluator:
    """``acc_target`` (target test accuracy), ``acc_source`` (source test accuracy), per-class target accuracy."""

    def __init__(self, batch_size: int = 1000, per_class: bool = True, plot: bool = True) -> None:
        self.batch_size, self.per_class, self.plot = int(batch_size), bool(per_class), bool(plot)

    def check(self, data=None) -> None:
        """Before training: the target test split is not empty (a ConfigError naming the fix otherwise)."""
        check_test_split(data, "the target accuracy")

    def __call__(self, method, data, logger, seed: int = 0) -> dict:
        if not hasattr(method, "predict"):
            raise TypeError(f"evaluator=domain_adaptation needs a method with predict(); {type(method).__name__} has "
                            "none (use a domain-adaptation model: model=da_dpswd, da_swd, da_dann or da_dp_dann)")
        t0 = time.time()
        pred = method.predict(data.test.x, self.batch_size)
        y = data.test.y
        metrics: dict = {"acc_target": float((pred == y).float().mean())}
        if getattr(data, "transductive_eval", False):  # test split = the private target records
            metrics["acc_target_note"] = TRANSDUCTIVE_NOTE
        src = getattr(data, "source_test", None)
        if src is not None and len(src):
            metrics["acc_source"] = float((method.predict(src.x, self.batch_size) == src.y).float().mean())
        k = int(data.num_classes)
        conf = torch.zeros(k, k)
        conf.index_put_((y, pred), torch.ones(len(y)), accumulate=True)
        if self.per_class:
            for c in range(k):
                n = conf[c].sum()
                if n > 0:
                    metrics[f"acc_target_class_{c}"] = float(conf[c, c] / n)
        run_dir = getattr(logger, "run_dir", None)
        if self.plot and run_dir is not None:
            _plot_confusion(conf, Path(run_dir) / "confusion_target.png",
                            f"{getattr(data, 'name', '')}: target accuracy {metrics['acc_target']:.3f}")
        metrics["eval_time_s"] = time.time() - t0
        return metrics


def _plot_confusion(conf: torch.Tensor, path: Path, title: str) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    norm = conf / conf.sum(1, keepdim=True).clamp_min(1)
    fig = Figure(figsize=(5, 4.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    im = ax.imshow(norm.numpy(), vmin=0, vmax=1, cmap="viridis")
    fig.colorbar(im, ax=ax)
    ax.set_xlabel("predicted class")
    ax.set_ylabel("true class")
    ax.set_title(title, fontsize="small")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)

"""Downstream utility of synthetic data (DP-SWD Table 2 / DP-MERF protocol, spec dpswd.md §3.3;
DP-Sinkhorn Table 1, spec dpsinkhorn.md §4).

Train classifiers on labelled synthetic samples, test on the real test set: scikit-learn LogReg
and MLP (DP-SWD / DP-MERF) and a small torch CNN (DP-Sinkhorn, :mod:`dpgen.eval.cnn`).
"""

from __future__ import annotations

import warnings

import numpy as np
import torch


def _flat(x: torch.Tensor) -> np.ndarray:
    return x.flatten(1).cpu().numpy().astype(np.float32)


def downstream_accuracy(x_syn: torch.Tensor, y_syn: torch.Tensor, x_test: torch.Tensor, y_test: torch.Tensor,
                        classifiers: tuple[str, ...] = ("logreg", "mlp"), seed: int = 0,
                        logreg_max_iter: int = 5000, mlp_max_iter: int = 200, cnn: dict | None = None,
                        num_classes: int | None = None, device: torch.device | str = "cpu") -> dict[str, float]:
    """Accuracy on ``(x_test, y_test)`` of classifiers fit on ``(x_syn, y_syn)``.

    ``x_*: (n, C, H, W)`` in [0, 1], ``y_*: (n,)``.

    * ``logreg``: ``LogisticRegression(solver='lbfgs', max_iter=5000)``
    * ``mlp``: ``MLPClassifier()`` defaults (100 ReLU units, Adam, lr 1e-3, max_iter 200)
    * ``cnn``: :class:`dpgen.eval.cnn.SmallCNN` trained by :func:`dpgen.eval.cnn.fit_cnn` with the
      keyword arguments in ``cnn`` (epochs, batch_size, lr, patience, ...)
    """
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier

    xs, ys = _flat(x_syn), y_syn.cpu().numpy()
    xt, yt = _flat(x_test), y_test.cpu().numpy()
    out: dict[str, float] = {}
    if len(np.unique(ys)) < 2:
        return {f"acc_{c}": float("nan") for c in classifiers}
    for name in classifiers:
        if name == "cnn":
            from .cnn import accuracy, fit_cnn

            k = int(num_classes) if num_classes is not None else int(max(ys.max(), yt.max())) + 1
            model = fit_cnn(x_syn.float().cpu(), y_syn.long().cpu(), k, seed=seed, device=device, **(cnn or {}))
            out["acc_cnn"] = accuracy(model, x_test.float().cpu(), y_test.long().cpu(), device=device)
            continue
        if name == "logreg":
            clf = LogisticRegression(solver="lbfgs", max_iter=logreg_max_iter)
        elif name == "mlp":
            clf = MLPClassifier(max_iter=mlp_max_iter, random_state=seed)
        else:
            raise ValueError(f"unknown downstream classifier {name!r}; choose logreg, mlp or cnn")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            clf.fit(xs, ys)
        out[f"acc_{name}"] = float((clf.predict(xt) == yt).mean())
    return out

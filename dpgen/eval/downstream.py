"""Downstream utility of synthetic data (DP-SWD Table 2 / DP-MERF protocol, DP-SWD paper, Table 2;
DP-Sinkhorn Table 1, DP-Sinkhorn paper, Table 1 protocol).

Train classifiers on labelled synthetic samples, test on the real test set.  Two protocols for LogReg and
MLP (``evaluator.protocol``):

* ``sklearn`` (default; DP-SWD Table 2 / DP-MERF): scikit-learn ``LogisticRegression`` and ``MLPClassifier``
  fitted to convergence on the whole synthetic set, pixels in [0, 1];
* ``torch`` (DP-Sinkhorn Table 1, the released ``finalize_result.py`` / ``torch_evaluate``): pixels in
  [-1, 1] with the generated pixels below 0 set to -1 (``img[img < 0.] = -1.0``), torch ``Linear(D, k)`` /
  ``Linear(D, 100) -> ReLU -> Linear(100, k)``, Adam lr 1e-4, weight decay 1e-6, batch 512, at most 300
  epochs; the first 90 % of the synthetic set trains, the last 10 % stops early (patience 10 LogReg /
  30 MLP epochs without a better validation accuracy) and the best-validation weights are restored.

The CNN is the small torch CNN of :mod:`dpgen.eval.cnn` under either protocol.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch


def _flat(x: torch.Tensor) -> np.ndarray:
    return x.flatten(1).cpu().numpy().astype(np.float32)


PROTOCOLS = ("sklearn", "torch")

# DP-Sinkhorn's torch_evaluate (DP-Sinkhorn paper, Table 1 protocol); evaluator.torch_clf overrides any of these
TORCH_CLF_DEFAULTS = {"lr": 1e-4, "weight_decay": 1e-6, "batch_size": 512, "max_epochs": 300,
                      "patience_logreg": 10, "patience_mlp": 30, "hidden": 100, "val_fraction": 0.1,
                      "threshold": True}


def torch_clf_settings(settings: dict | None = None) -> dict:
    """``TORCH_CLF_DEFAULTS`` updated with ``settings`` (``evaluator.torch_clf``); an unknown key is an error."""
    unknown = set(settings or {}) - set(TORCH_CLF_DEFAULTS)
    if unknown:
        raise ValueError(f"evaluator.torch_clf: unknown keys {sorted(unknown)}; known: {sorted(TORCH_CLF_DEFAULTS)}")
    return {**TORCH_CLF_DEFAULTS, **(settings or {})}


def torch_protocol_inputs(x_syn: torch.Tensor, x_test: torch.Tensor, threshold: bool = True
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """DP-Sinkhorn's classifier inputs: ``(n, C, H, W)`` in [0, 1] -> flattened ``(n, D)`` in [-1, 1]; with
    ``threshold`` the generated pixels below 0 (i.e. below 0.5 in [0, 1]) are set to -1, as
    ``finalize_result.py`` does in place before its classifiers (the real test images are not thresholded)."""
    xs = x_syn.flatten(1).float() * 2 - 1
    if threshold:
        xs = torch.where(xs < 0, torch.full_like(xs, -1.0), xs)
    return xs, x_test.flatten(1).float() * 2 - 1


def torch_protocol_accuracy(name: str, x_syn: torch.Tensor, y_syn: torch.Tensor, x_test: torch.Tensor,
                            y_test: torch.Tensor, num_classes: int, seed: int = 0, settings: dict | None = None,
                            device: torch.device | str = "cpu") -> float:
    """Accuracy on the real test set of DP-Sinkhorn's torch ``logreg`` or ``mlp`` fitted on the synthetic set.

    ``x_*: (n, C, H, W)`` in [0, 1] (converted by :func:`torch_protocol_inputs`), ``y_*: (n,)``;
    ``settings``: keys of ``TORCH_CLF_DEFAULTS``.
    """
    from torch import nn

    from .cnn import Adam, accuracy, fit_early_stopping

    cfg = torch_clf_settings(settings)
    xs, xt = torch_protocol_inputs(x_syn, x_test, bool(cfg["threshold"]))
    d = xs.shape[1]
    torch.manual_seed(seed)
    if name == "logreg":
        model = nn.Linear(d, num_classes)
    elif name == "mlp":
        model = nn.Sequential(nn.Linear(d, int(cfg["hidden"])), nn.ReLU(), nn.Linear(int(cfg["hidden"]), num_classes))
    else:
        raise ValueError(f"evaluator.protocol=torch fits logreg or mlp, not {name!r}")
    model = model.to(device)
    opt = Adam(model.parameters(), lr=float(cfg["lr"]), weight_decay=float(cfg["weight_decay"]))
    model = fit_early_stopping(model, opt, xs, y_syn.long().cpu(), epochs=int(cfg["max_epochs"]),
                               batch_size=int(cfg["batch_size"]), patience=int(cfg[f"patience_{name}"]),
                               val_fraction=float(cfg["val_fraction"]), seed=seed, device=device)
    return accuracy(model, xt, y_test.long().cpu(), device=device)


def downstream_accuracy(x_syn: torch.Tensor, y_syn: torch.Tensor, x_test: torch.Tensor, y_test: torch.Tensor,
                        classifiers: tuple[str, ...] = ("logreg", "mlp"), seed: int = 0,
                        logreg_max_iter: int = 5000, mlp_max_iter: int = 200, cnn: dict | None = None,
                        num_classes: int | None = None, device: torch.device | str = "cpu",
                        protocol: str = "sklearn", torch_clf: dict | None = None) -> dict[str, float]:
    """Accuracy on ``(x_test, y_test)`` of classifiers fit on ``(x_syn, y_syn)``.

    ``x_*: (n, C, H, W)`` in [0, 1], ``y_*: (n,)``.

    * ``logreg``: ``protocol='sklearn'``: ``LogisticRegression(solver='lbfgs', max_iter=5000)``;
      ``protocol='torch'``: DP-Sinkhorn's torch LogReg (:func:`torch_protocol_accuracy`, ``torch_clf``)
    * ``mlp``: ``protocol='sklearn'``: ``MLPClassifier()`` defaults (100 ReLU units, Adam, lr 1e-3,
      max_iter 200); ``protocol='torch'``: DP-Sinkhorn's torch MLP
    * ``cnn``: :class:`dpgen.eval.cnn.SmallCNN` trained by :func:`dpgen.eval.cnn.fit_cnn` with the
      keyword arguments in ``cnn`` (epochs, batch_size, lr, patience, ...)
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"evaluator.protocol={protocol!r}: choose from {PROTOCOLS}")
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier

    ys, yt = y_syn.cpu().numpy(), y_test.cpu().numpy()
    xs = xt = None  # flattened numpy copies, made once and only for a scikit-learn fit
    out: dict[str, float] = {}
    if len(np.unique(ys)) < 2:
        return {f"acc_{c}": float("nan") for c in classifiers}
    k = int(num_classes) if num_classes is not None else int(max(ys.max(), yt.max())) + 1
    for name in classifiers:
        if name == "cnn":
            from .cnn import accuracy, fit_cnn

            model = fit_cnn(x_syn.float().cpu(), y_syn.long().cpu(), k, seed=seed, device=device, **(cnn or {}))
            out["acc_cnn"] = accuracy(model, x_test.float().cpu(), y_test.long().cpu(), device=device)
            continue
        if protocol == "torch" and name in ("logreg", "mlp"):
            out[f"acc_{name}"] = torch_protocol_accuracy(name, x_syn.cpu(), y_syn.cpu(), x_test.cpu(), y_test.cpu(),
                                                         k, seed, torch_clf, device)
            continue
        if name == "logreg":
            clf = LogisticRegression(solver="lbfgs", max_iter=logreg_max_iter)
        elif name == "mlp":
            clf = MLPClassifier(max_iter=mlp_max_iter, random_state=seed)
        else:
            raise ValueError(f"unknown downstream classifier {name!r}; choose logreg, mlp or cnn")
        if xs is None:
            xs, xt = _flat(x_syn), _flat(x_test)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            clf.fit(xs, ys)
        out[f"acc_{name}"] = float((clf.predict(xt) == yt).mean())
    return out

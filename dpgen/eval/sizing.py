"""How large an evaluation is: sized to the data's PUBLIC size, with the preset's values as caps.

A built-in dataset is evaluated at its preset's sizes: the published protocols (60,000 balanced synthetic
samples for MNIST in DP-MERF / DP-SWD, 10,000 generated images for the FID).  Your own data carries the
public size its evaluation is sized to (``DataSplits.eval_size``: a declared ``dataset.declared_size``, else
a size computed from the test split, :func:`dpgen.data.own.evaluation_size`), and every count below is a
function of that size, the test split's size, the number of classes and the preset's values only.

Never of the number of private training records: under the add/remove relation that number is private, and
every count here is published (results.json, the console, W&B), so sizing by it would release it without
noise.

* synthetic samples for the classifiers: as many as the public size (DP-MERF's protocol: a synthetic set the
  size of the training set), at least :data:`MIN_PER_CLASS` per class, at most the preset's
  ``evaluator.n_synthetic``;
* generated images for the FID: as many as its reference set has images (the usual equal-size comparison),
  at most the preset's ``evaluator.fid.n_fid``;
* the classifiers' schedules: the CNN's and the domain extractor's ``min_steps`` (their epochs are raised for
  small sets until that many Adam steps are taken) at most :data:`MIN_STEPS_EPOCHS` epochs of the set they fit,
  so a set of a few hundred images is not fitted for hundreds of epochs; never above the preset's value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MIN_PER_CLASS = 100  # a synthetic set of at least this many images per class for the classifiers
MIN_STEPS_EPOCHS = 30  # own data: min_steps raises a schedule to at most this many epochs of a small set


@dataclass(frozen=True)
class EvaluationSizes:
    """The counts one evaluation uses; ``sized_to`` says what they were sized to (None: the preset's values)."""

    n_synthetic: int
    n_fid: int
    cnn_min_steps: int
    domain_min_steps: int
    sized_to: str | None = None

    def describe(self) -> str:
        """One console line: the counts and what they were sized to."""
        counts = [f"{self.n_synthetic} synthetic samples for the classifiers"] if self.n_synthetic else []
        counts += [f"{self.n_fid} generated images for the FID"] if self.n_fid else []
        return (f"evaluation sized to {self.sized_to} (a public size; the preset's values are caps): "
                + (", ".join(counts) or "nothing to generate"))


def synthetic_count(cap: int, public_size: int, num_classes: int) -> int:
    """Synthetic samples for the classifiers: ``public_size``, at least ``MIN_PER_CLASS`` per class, at most ``cap``."""
    return max(0, min(int(cap), max(int(public_size), MIN_PER_CLASS * int(num_classes))))


def fid_count(cap: int, n_reference: int) -> int:
    """Generated images for the FID: as many as the reference set, at most ``cap``."""
    return max(0, min(int(cap), int(n_reference)))


def min_steps_for(preset: int, n_fitted: int, batch_size: int) -> int:
    """``min_steps`` of a schedule fitting ``n_fitted`` (public) images: the preset's, or fewer, so that it
    raises the schedule to no more than :data:`MIN_STEPS_EPOCHS` epochs."""
    steps_per_epoch = max(1, math.ceil(int(n_fitted) / max(1, int(batch_size))))
    return min(int(preset), MIN_STEPS_EPOCHS * steps_per_epoch)


def evaluation_sizes(n_synthetic: int, n_fid: int, cnn_min_steps: int, cnn_batch: int, domain_min_steps: int,
                     domain_batch: int, num_classes: int, public_size: int | None, sized_from: str | None,
                     n_fid_reference: int | None, n_domain_train: int | None) -> EvaluationSizes:
    """The evaluation's counts: the preset's values when ``public_size`` is None (a built-in dataset), else sized
    to ``public_size`` (module docstring).  ``n_fid_reference``: the FID reference set's size (None: no FID);
    ``n_domain_train``: the images the domain extractor is trained on (public or test: None when not used)."""
    # every argument is public: the preset's values, the number of classes, a declared size or the test split's
    if public_size is None:
        return EvaluationSizes(int(n_synthetic), int(n_fid), int(cnn_min_steps), int(domain_min_steps))
    n_syn = synthetic_count(n_synthetic, public_size, num_classes) if n_synthetic > 0 else 0
    return EvaluationSizes(
        n_synthetic=n_syn,
        n_fid=fid_count(n_fid, n_fid_reference) if n_fid_reference is not None else 0,  # None: no FID
        cnn_min_steps=min_steps_for(cnn_min_steps, max(1, int(0.9 * n_syn)), cnn_batch),
        domain_min_steps=(min_steps_for(domain_min_steps, n_domain_train, domain_batch) if n_domain_train
                          else int(domain_min_steps)),
        sized_to=sized_from)

"""δ must be below 1/N (N = private records): a larger δ allows a mechanism that publishes a whole record.

A run with ``delta >= 1/N`` is refused (``PrivacySettingError`` on ``delta``; the config layer names
``accountant.delta``), never run with a weaker label:

1. before any data is loaded, when the dataset config fixes an upper bound on N — the size of the
   dataset's training split, a published fact of the dataset (``KNOWN_TRAIN_SIZES``), or a size the
   config itself sets (``toy_gaussians.n_train``, ``celeba.max_train``, ``digits.test_fraction``).
   The private split is at most that large (a public fraction only removes records): N <= bound, so
   1/bound <= 1/N and ``δ < 1/bound`` implies ``δ < 1/N`` (a δ that passes is below 1/N; every δ >= 1/N is
   refused here). The check is conservative: a δ between 1/bound and 1/N (a private split much smaller than
   the dataset's training split) is refused too;
2. right after loading, before training, with the exact N of the private split (own data, the
   domain-adaptation pairs, a public fraction).  Under add/remove neighbours (Poisson sampling) N
   itself is private: the message never prints it (nor 1/N, nor a δ derived from it), but a
   refusal still reveals one bit of N — whether N <= 1/δ — to whoever sees it (the operator, who
   holds the data; the line goes to stderr only).
"""

from __future__ import annotations

import math

from .errors import PrivacySettingError

# records in the training split of each dataset, as published with it (torchvision's splits)
KNOWN_TRAIN_SIZES: dict[str, int] = {
    "dpgen.data.datasets.mnist": 60_000,
    "dpgen.data.datasets.fashion_mnist": 60_000,
    "dpgen.data.datasets.usps": 7_291,
    "dpgen.data.vision.cifar10": 50_000,
    "dpgen.data.vision.svhn": 73_257,
    "dpgen.data.vision.celeba": 162_770,
}
SKLEARN_DIGITS = 1_797  # scikit-learn's bundled 8x8 digits


def known_record_bound(dataset) -> int | None:
    """An upper bound on the private records of the dataset config ``dataset`` without loading it; None
    when only the loaded data can tell (own data, domain-adaptation pairs, feature files)."""
    target = str(dataset.get("_target_", ""))
    if target == "dpgen.data.datasets.digits":  # train_test_split(test_size=test_fraction): ceil for the test set
        return SKLEARN_DIGITS - math.ceil(float(dataset.get("test_fraction", 0.25)) * SKLEARN_DIGITS)
    if target == "dpgen.data.datasets.toy_gaussians":
        return int(dataset.get("n_train", 2000))
    size = KNOWN_TRAIN_SIZES.get(target)
    if size is not None and dataset.get("max_train") is not None:
        size = min(size, int(dataset.get("max_train")))
    return size


def example_delta(n: int) -> float:
    """A power of ten strictly below 1/n (what the error message suggests)."""
    power = 10.0 ** math.floor(math.log10(1.0 / n))
    return power / 10 if power >= 1.0 / n else power


def check_delta(delta: float, n: int, bound: bool = False) -> None:
    """Refuse ``delta >= 1/n``.  ``bound=True``: ``n`` is a public upper bound known before loading (named
    in the message, with a δ below it); else ``n`` is the private count and stays out of the message."""
    if n < 1 or float(delta) < 1.0 / n:
        return
    if bound:
        raise PrivacySettingError("delta", f"delta={float(delta):g} is not below 1/N = {1.0 / n:.2e} for N = at most "
                                           f"{n} private records (the dataset's training split): such a δ allows "
                                           f"publishing whole records; fix: delta={example_delta(n):g} (or smaller)")
    raise PrivacySettingError("delta", f"delta={float(delta):g} is not below 1/N for this private set (N, the number "
                                       "of private records, is not printed: it is private data): such a δ allows "
                                       "publishing whole records; fix: a smaller delta, well below 1/N for your own "
                                       "count of records")

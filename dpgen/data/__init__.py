"""Datasets and splits (public / private / test)."""
from .base import DatasetNotFoundError, DataSplits, PrivateSplit, TensorSplit, split_public_private

__all__ = ["DatasetNotFoundError", "DataSplits", "PrivateSplit", "TensorSplit", "split_public_private"]

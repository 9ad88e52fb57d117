"""The checks behind the one-line user errors (no subprocess: see tests/e2e/test_cli_errors.py for the CLI)."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from dpgen.config import check_delta_of_config
from dpgen.data import integrity
from dpgen.data.base import DatasetNotFoundError
from dpgen.errors import ConfigError, DataFileError, UserError
from dpgen.logging.wandb_checks import check_wandb, wandb_mode
from dpgen.preflight import preflight
from dpgen.privacy.delta import example_delta, known_record_bound


def test_user_errors_share_one_base_class():
    assert issubclass(ConfigError, UserError) and issubclass(ConfigError, ValueError)
    assert issubclass(DatasetNotFoundError, UserError) and issubclass(DatasetNotFoundError, FileNotFoundError)
    assert issubclass(DataFileError, UserError)


# ---------------------------------------------------------------------------------------- δ < 1/N
def _cfg(dataset: dict, delta: float, private: bool = True):
    return OmegaConf.create({"dataset": dataset, "accountant": {"delta": delta}, "model": {"private": private}})


@pytest.mark.parametrize("dataset,bound", [
    ({"_target_": "dpgen.data.datasets.mnist"}, 60_000),
    ({"_target_": "dpgen.data.datasets.digits", "test_fraction": 0.25}, 1347),  # = the loaded digits split
    ({"_target_": "dpgen.data.datasets.toy_gaussians", "n_train": 500}, 500),
    ({"_target_": "dpgen.data.vision.celeba", "max_train": 1000}, 1000),
    ({"_target_": "dpgen.data.domain.feature_pair"}, None),  # only the loaded data tells
])
def test_known_record_bound_needs_no_data(dataset, bound):
    assert known_record_bound(OmegaConf.create(dataset)) == bound


def test_delta_at_or_above_one_over_n_is_refused_before_and_after_loading():
    digits = {"_target_": "dpgen.data.datasets.digits"}
    with pytest.raises(ConfigError, match=r"accountant.delta: delta=0.001 .*N = at most 1347.*fix: delta=0.0001"):
        check_delta_of_config(_cfg(digits, 1e-3))
    check_delta_of_config(_cfg(digits, 1e-4))
    check_delta_of_config(_cfg(digits, 1e-3, private=False))  # a non-private run has no δ to honour
    own = {"_target_": "dpgen.data.own.image_folder"}
    check_delta_of_config(_cfg(own, 1e-3))  # unknown before loading: checked after
    with pytest.raises(ConfigError, match=r"not below 1/N for this private set") as refused:
        check_delta_of_config(_cfg(own, 1e-3), n=1000)  # δ = 1/N exactly is refused too
    assert "1000" not in str(refused.value) and "1e-0" not in str(refused.value)  # the private N stays out
    check_delta_of_config(_cfg(own, 1e-3), n=999)  # 1/N = 1.001e-3 > δ


@pytest.mark.parametrize("n", [7, 10, 1000, 1347, 60_000])
def test_suggested_delta_is_below_one_over_n(n):
    assert example_delta(n) < 1.0 / n <= 100 * example_delta(n)


# ------------------------------------------------------------------------------------ damaged data
def _copy_labels(data_root, tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    dst = raw / "t10k-labels-idx1-ubyte"
    dst.write_bytes((data_root / "MNIST" / "raw" / "t10k-labels-idx1-ubyte").read_bytes())
    return dst


@pytest.mark.usefixtures("data_root")
def test_published_checksums_match_the_real_files_and_catch_a_garbled_copy(data_root, tmp_path):
    for (folder, name), (size, md5) in integrity.KNOWN_FILES.items():
        path = data_root / folder / name
        if path.is_file() and size < 1_000_000:  # the small files: fast
            assert path.stat().st_size == size and integrity.md5_of(path) == md5
    copy = _copy_labels(data_root, tmp_path)
    integrity.check_damaged([copy], "mnist")
    data = bytearray(copy.read_bytes())
    data[5000] ^= 0xFF  # same size, one byte garbled: it would load fine
    copy.write_bytes(bytes(data))
    with pytest.raises(DataFileError, match=r"t10k-labels-idx1-ubyte is damaged .*MD5 .*fix: delete it"):
        integrity.check_damaged([copy], "mnist")


@pytest.mark.usefixtures("data_root")
def test_files_are_hashed_once_then_remembered(data_root, tmp_path, monkeypatch):
    monkeypatch.setenv("DPGEN_CACHE_DIR", str(tmp_path / "cache"))
    copy = _copy_labels(data_root, tmp_path)
    integrity.verify_once([copy], "mnist")
    assert str(copy.resolve()) in json.loads((tmp_path / "cache" / integrity.MARKER).read_text())
    monkeypatch.setattr(integrity, "md5_of", lambda p: pytest.fail("hashed again"))
    integrity.verify_once([copy], "mnist")  # same path, size and mtime: no hashing
    with integrity.reading([copy], "mnist"):
        pass


def test_a_read_failure_of_a_file_without_checksum_names_the_file(tmp_path):
    h5 = tmp_path / "usps.h5"
    h5.write_bytes(b"not hdf5")
    with pytest.raises(DataFileError, match=r"usps.h5 is damaged \(cannot be read: OSError"):
        with integrity.reading([h5], "usps"):
            raise OSError("Unable to open file (file signature not found)")


def test_a_bug_while_reading_intact_files_keeps_its_traceback(tmp_path):
    a, b = tmp_path / "a.bin", tmp_path / "b.bin"
    a.write_bytes(b"1")
    b.write_bytes(b"2")
    with pytest.raises(RuntimeError, match="a bug"):
        with integrity.reading([a, b], "x"):
            raise RuntimeError("a bug")


# --------------------------------------------------------------------------------------------- W&B
def test_wandb_mode_from_the_environment_wins(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert wandb_mode("online") == "offline"
    monkeypatch.setenv("WANDB_MODE", "dryrun")  # W&B's older spelling
    assert wandb_mode("online") == "offline"
    monkeypatch.setenv("WANDB_MODE", "")
    assert wandb_mode("online") == "online"
    monkeypatch.setenv("WANDB_MODE", "sometimes")
    with pytest.raises(ConfigError, match="WANDB_MODE='sometimes'"):
        wandb_mode("offline")
    monkeypatch.setenv("WANDB_MODE", "offline")
    with pytest.raises(ConfigError, match="logger.wandb.mode='sometimes'"):
        wandb_mode("sometimes")  # a bad config value is refused even when the environment overrides it


def test_online_without_login_is_a_user_error_offline_is_not(monkeypatch):
    from dpgen.logging import wandb_checks

    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setattr(wandb_checks, "wandb_logged_in", lambda: False)
    with pytest.raises(ConfigError, match="wandb login.*WANDB_MODE=offline.*logger=local"):
        check_wandb(OmegaConf.create({"mode": "online"}))
    check_wandb(OmegaConf.create({"mode": "offline"}))
    monkeypatch.setenv("WANDB_MODE", "offline")
    check_wandb(OmegaConf.create({"mode": "online"}))  # the environment says offline: no login needed


# --------------------------------------------------------------------------------------- preflight
def test_preflight_leaves_hydra_flags_and_good_command_lines_alone(tmp_path):
    assert preflight(["--help"]) is None and preflight(["--cfg", "job", "nosuch=1"]) is None
    assert preflight(["experiment=digits_dpswd", f"hydra.run.dir={tmp_path / 'run'}"]) is None
    assert preflight(["-m", "experiment=digits_dpswd", "accountant.epsilon=1,10",
                      f"hydra.sweep.dir={tmp_path / 'sweep'}"]) is None
    assert "write each setting as key=value" in preflight(["experiment"])

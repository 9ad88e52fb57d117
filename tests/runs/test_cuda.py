"""On a CUDA device (marked ``cuda``: skipped without one; ``make gpu-check`` runs them first).

* every private family takes a few steps on cuda through the real pipeline, and its privacy figures
  (epsilon, every mechanism's noise) are those of the same run on the CPU: the calibration and the
  ledger do not depend on the device;
* a mechanism draws its noise from its own CPU generator and moves it: a release on cuda equals the
  same release on the CPU (same seed), so a run resumed on another device draws the noise it would have;
* ``trainer.precision=bf16`` on cuda: every released tensor is float32, on cuda, outside any autocast region.
"""

from __future__ import annotations

import pytest
import torch

from dpgen.bench.gpu_check import FAMILIES, SHORT, compose
from dpgen.pipeline import run

pytestmark = pytest.mark.cuda
STEPS = 3


def _run(family: str, device: str, tmp_path, *extra: str) -> dict:
    cfg = compose([*FAMILIES[family][1], *SHORT, f"trainer.device={device}", f"trainer.max_steps={STEPS}",
                   *extra], tmp_path / f"{family}-{device}")
    return run(cfg)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_family_trains_on_cuda_with_the_cpu_runs_privacy(family, tmp_path):
    gpu, cpu = _run(family, "cuda", tmp_path), _run(family, "cpu", tmp_path)
    assert gpu["device"].startswith("cuda") and gpu["train"]["train_steps"] == cpu["train"]["train_steps"] >= 1
    assert gpu["privacy"]["epsilon"] == pytest.approx(cpu["privacy"]["epsilon"], rel=1e-9)
    for name, mech in cpu["train"]["mechanisms"].items():
        assert gpu["train"]["mechanisms"][name]["noise_std"] == pytest.approx(mech["noise_std"], rel=1e-9), name


def test_a_release_on_cuda_adds_the_cpu_generators_noise():
    from dpgen.privacy import PrivacyLedger
    from dpgen.privacy.mechanisms import ImageGradientSanitiser
    from dpgen.privacy.noise import FixedStd

    def release(device: str) -> torch.Tensor:
        m = ImageGradientSanitiser(PrivacyLedger(10.0, 1e-5), clip_norm=1.0, n_rows=4, sample_rate=0.01, seed=3,
                                   noise=FixedStd(2 * 1.0 * 2.0))  # the paper's sigma 2: std 2 C sigma
        return m.release(torch.full((4, 1, 8, 8), 0.01, device=device))

    on_cpu, on_cuda = release("cpu"), release("cuda")
    assert on_cuda.device.type == "cuda" and on_cuda.dtype == torch.float32
    assert on_cpu.std() > 1.0  # the noise is there (std 2 C sigma = 4)
    torch.testing.assert_close(on_cuda.cpu(), on_cpu, rtol=0, atol=1e-5)


@pytest.mark.parametrize("family", ["dpswd_generator", "dpsinkhorn", "dp_dann"])
def test_bf16_on_cuda_releases_float32_outside_autocast(family, tmp_path, monkeypatch):
    import dpgen.privacy  # noqa: F401  (every mechanism class is defined)
    from dpgen.privacy.mechanisms import Mechanism

    seen: list[tuple[torch.dtype, str, bool]] = []

    def subclasses(cls):
        for c in cls.__subclasses__():
            yield c
            yield from subclasses(c)

    for cls in {Mechanism, *subclasses(Mechanism)}:
        orig = vars(cls).get("release")
        if orig is None:
            continue

        def rel(self, *a, _orig=orig, **k):
            autocast = torch.is_autocast_enabled("cuda")
            out = _orig(self, *a, **k)
            for v in (out.values() if isinstance(out, dict) else [out]):
                if isinstance(v, torch.Tensor) and v.is_floating_point():
                    seen.append((v.dtype, v.device.type, autocast))
            return out

        monkeypatch.setattr(cls, "release", rel)
    res = _run(family, "cuda", tmp_path, "trainer.precision=bf16")
    assert res["precision"] == "bf16" and seen
    assert {s[:2] for s in seen} == {(torch.float32, "cuda")}, set(seen)
    assert not any(s[2] for s in seen), "a mechanism released inside an autocast region"

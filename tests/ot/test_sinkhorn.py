"""Entropic OT / semi-debiased Sinkhorn loss (dpgen.ot.sinkhorn), cross-checked against POT."""

from __future__ import annotations

import math
from functools import partial

import numpy as np
import ot as pot
import pytest
import torch

from dpgen.ot.sinkhorn import EntropicOT, cost_matrix, embed, extra_rows, sinkhorn_generator_loss


def _pot_value_and_grad(x: torch.Tensor, y: torch.Tensor, reg: float, cost: str, m: float):
    """Primal entropic OT value <C, π> + λ KL(π | a⊗b) and its envelope gradient Σ_j π_ij ∇c(x_i, y_j),
    from POT's log-domain Sinkhorn run to convergence."""
    c = cost_matrix(x.detach(), y, cost, m).numpy()
    a, b = np.full(len(x), 1 / len(x)), np.full(len(y), 1 / len(y))
    plan = pot.sinkhorn(a, b, c, reg, method="sinkhorn_log", numItermax=200_000, stopThr=1e-13)
    value = (plan * c).sum() + reg * (plan * np.log(plan / np.outer(a, b) + 1e-300)).sum()
    xg = x.detach().clone().requires_grad_(True)
    (torch.tensor(plan) * cost_matrix(xg, y, cost, m)).sum().backward()
    return value, xg.grad


@pytest.mark.parametrize("cost,m", [("l2", 1.0), ("l1", 1.0), ("l1+l2", 1.0), ("l1+l2", 3.0)])
def test_entropic_ot_value_and_gradient_match_pot(cost, m):
    g = torch.Generator().manual_seed(1)
    x = torch.rand(14, 6, generator=g, dtype=torch.float64).requires_grad_(True)
    y = torch.rand(10, 6, generator=g, dtype=torch.float64)
    reg = 0.5
    w = EntropicOT(reg=reg, cost=cost, m=m, scaling=0.98)
    value = w(x, y)
    (grad,) = torch.autograd.grad(value, x)
    ref_value, ref_grad = _pot_value_and_grad(x, y, reg, cost, m)
    assert float(value) == pytest.approx(ref_value, rel=2e-3)
    assert float((grad - ref_grad).norm() / ref_grad.norm()) < 0.03


def test_cost_matrix_matches_brute_force():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(5, 7, generator=g), torch.randn(4, 7, generator=g)
    diff = x[:, None] - y[None]
    torch.testing.assert_close(cost_matrix(x, y, "l2"), (diff ** 2).sum(-1), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(cost_matrix(x, y, "l1"), diff.abs().sum(-1))
    torch.testing.assert_close(cost_matrix(x, y, "l1+l2", m=3.0), (diff ** 2).sum(-1) + 3 * diff.abs().sum(-1),
                               rtol=1e-5, atol=1e-4)
    with pytest.raises(ValueError, match="model.cost"):
        cost_matrix(x, y, "l3")


def _mnist_like(n: int, seed: int, k: int = 10) -> torch.Tensor:
    """Rows like DP-Sinkhorn's features: 64 pixels in [-1, 1] and 15 * one-hot(label)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 64, generator=g) * 2 - 1
    return embed(x, torch.randint(k, (n,), generator=g), k, 15.0)


def test_sinkhorn_divergence_of_identical_inputs_is_zero():
    x = _mnist_like(40, 0)
    assert abs(float(EntropicOT(reg=0.05).divergence(x, x.clone()))) < 1e-3


@pytest.mark.parametrize("noise", [0.0, 1e-3, 0.05])
def test_debiased_loss_is_not_negative_on_identical_or_nearly_identical_inputs(noise):
    """With the chosen settings (scaling 0.9, ε-scaling from the largest cost) the debiased divergence of
    (nearly) identical point clouds stays >= 0 up to float error."""
    x = _mnist_like(50, 1)
    y = x + noise * torch.randn(x.shape, generator=torch.Generator().manual_seed(2))
    div = float(EntropicOT(reg=0.05, cost="l1+l2", m=1.0).divergence(x, y))
    assert div > -1e-3 * (1 + abs(float(EntropicOT(reg=0.05)(x, y))))


def test_semi_debiased_equals_the_fully_debiased_estimator_at_p1():
    """p = 1: Ŝ = 2W(X[0:n], Y) − W(X[0:n], X[n:2n]) — the second argument is an independent sample."""
    w = EntropicOT(reg=0.5, scaling=0.95)
    xg, y = _mnist_like(24, 3), _mnist_like(12, 4)
    n = 12
    semi = sinkhorn_generator_loss(w, xg, y, n, "semi", ratio=1.0)
    full = 2 * w(xg[:n], y) - w(xg[:n], xg[n:2 * n])
    assert float(semi) == pytest.approx(float(full), rel=1e-6)
    assert extra_rows(n, 1.0) == n and extra_rows(n, 0.4) == 4


def test_semi_debiased_equals_the_biased_loss_at_p0_up_to_a_constant():
    """p = 0: the second term is W(X, X), which for λ-separated points is λ·log n (π = I/n) and has no
    gradient: the loss equals the biased 2W(X, Y) up to a constant in X."""
    reg, n = 0.05, 16
    w = EntropicOT(reg=reg)
    xg = _mnist_like(n, 5).requires_grad_(True)
    y = _mnist_like(20, 6)
    semi = sinkhorn_generator_loss(w, xg, y, n, "semi", ratio=0.0)
    biased = sinkhorn_generator_loss(w, xg, y, n, "none")
    assert float(biased - semi) == pytest.approx(reg * math.log(n), rel=1e-3)
    (g_semi,) = torch.autograd.grad(semi, xg)
    (g_biased,) = torch.autograd.grad(biased, xg)
    assert float((g_semi - g_biased).norm() / g_biased.norm()) < 1e-3


def test_semi_debiased_loss_checks_the_number_of_generated_rows():
    w = EntropicOT(reg=0.5)
    with pytest.raises(ValueError, match="floor"):
        sinkhorn_generator_loss(w, _mnist_like(10, 0), _mnist_like(10, 1), 10, "semi", ratio=0.4)
    with pytest.raises(ValueError, match="model.debias"):
        sinkhorn_generator_loss(w, _mnist_like(10, 0), _mnist_like(10, 1), 10, "half")
    with pytest.raises(ValueError, match="model.reg"):
        EntropicOT(reg=0.0)


# -- model.sinkhorn_backend ------------------------------------------------------------------------------
def test_sinkhorn_backend_setting_is_validated_and_names_the_fix(monkeypatch):
    from dpgen.methods.dpsinkhorn import DPSinkhorn
    from dpgen.models import DCGANCondGenerator

    with pytest.raises(ValueError, match="model.sinkhorn_backend='keops' is unknown"):
        EntropicOT(backend="keops")
    with pytest.raises(ValueError, match="model.sinkhorn_backend"):
        DPSinkhorn(DCGANCondGenerator, sinkhorn_backend="auto")
    assert EntropicOT().backend == "tensorized"  # the default is unchanged
    monkeypatch.setitem(__import__("sys").modules, "pykeops", None)  # `import pykeops` -> ImportError
    for make in (lambda: EntropicOT(backend="online"), lambda: DPSinkhorn(DCGANCondGenerator,
                                                                          sinkhorn_backend="online")):
        with pytest.raises(ValueError, match=r"model.sinkhorn_backend=online needs pykeops") as e:
            make()
        assert "pip install pykeops" in str(e.value) and "model.sinkhorn_backend=tensorized" in str(e.value)


def test_keops_cost_formula_reads_like_cost_matrix():
    from dpgen.ot.sinkhorn import keops_cost_formula

    assert keops_cost_formula("l2") == "SqDist(X,Y)"
    assert keops_cost_formula("l1") == "Sum(Abs(X-Y))"
    assert keops_cost_formula("l1+l2", 3.0) == "(SqDist(X,Y) + RatCst(3,1) * Sum(Abs(X-Y)))"
    assert keops_cost_formula("l1+l2", 0.25) == "(SqDist(X,Y) + RatCst(1,4) * Sum(Abs(X-Y)))"
    assert keops_cost_formula("l1+l2", 0.0) == "SqDist(X,Y)"
    with pytest.raises(ValueError, match="model.cost"):
        keops_cost_formula("l3")


@pytest.mark.slow  # compiles KeOps kernels (~1 min on one CPU core) into a tmp build folder
@pytest.mark.parametrize("cost,m", [("l1+l2", 3.0), ("l2", 1.0)])
def test_online_backend_matches_tensorized(cost, m, tmp_path_factory):
    """GeomLoss' KeOps backend with dpgen's cost formula = the tensorized backend with the torch cost:
    the semi-debiased generator loss and its gradient (float64) agree to rtol 1e-5 / atol 1e-7 relative to the
    gradient scale (measured: ≤ 1e-7; GeomLoss' online softmin passes 1/ε through a float32 tensor,
    ``torch.Tensor([1 / eps]).type_as(x)``, so float64 agreement stops near float32's 6e-8)."""
    pykeops = pytest.importorskip("pykeops")
    old = pykeops.get_build_folder()
    pykeops.set_build_folder(str(tmp_path_factory.mktemp("keops")))  # hermetic: never the user's cache
    try:
        g = torch.Generator().manual_seed(3)
        x0 = torch.rand(14, 9, generator=g, dtype=torch.float64) * 2 - 1  # n = 10 rows + floor(0.4*10) extra
        y = torch.rand(12, 9, generator=g, dtype=torch.float64) * 2 - 1
        out = {}
        for backend in ("tensorized", "online"):
            w = EntropicOT(reg=0.3, cost=cost, m=m, scaling=0.8, backend=backend)
            x = x0.clone().requires_grad_(True)
            loss = sinkhorn_generator_loss(w, x, y, n=10, debias="semi", ratio=0.4)
            loss.backward()
            out[backend] = (loss.detach(), x.grad)
        (lt, gt), (lo, go) = out["tensorized"], out["online"]
        scale = float(gt.abs().max())
        assert scale > 1e-3  # a gradient that is not trivially zero
        torch.testing.assert_close(lo, lt, rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(go, gt, rtol=1e-5, atol=1e-6 * scale)
    finally:
        pykeops.set_build_folder(old)


def test_the_paired_solve_equals_the_two_separate_ones():
    """W(X, Y1) and W(X, Y2) of different sizes in one batched problem (the shorter padded with weight 0):
    the values and the gradients w.r.t. X and Y2 of the separate solves, to float rounding."""
    g = torch.Generator().manual_seed(0)
    x = torch.rand(12, 6, generator=g, dtype=torch.float64).requires_grad_(True)
    y1 = torch.rand(9, 6, generator=g, dtype=torch.float64)
    y2 = torch.rand(5, 6, generator=g, dtype=torch.float64).requires_grad_(True)
    w = EntropicOT(reg=0.1, scaling=0.9, diameter=30.0)
    sep = w(x, y1), w(x, y2)
    joint = w.pair(x, y1, y2)
    for s, j in zip(sep, joint, strict=True):
        torch.testing.assert_close(j, s, rtol=1e-9, atol=1e-9)
    gs = torch.autograd.grad(2 * sep[0] - sep[1], (x, y2))
    gj = torch.autograd.grad(2 * joint[0] - joint[1], (x, y2))
    for s, j in zip(gs, gj, strict=True):
        torch.testing.assert_close(j, s, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("n,m1,scaling", [(10, 7, 0.9), (10, 14, 0.5), (12, 12, 0.9)])
def test_the_batched_sinkhorn_iteration_equals_geomloss(n, m1, scaling):
    """The paired solve (one soft-C-transform per iteration, every cloud padded to a square) gives GeomLoss'
    batched tensorized Sinkhorn on the same padded problem: the values and the gradients w.r.t. X and Y2 to
    float64 rounding, the float32 values to 1e-6."""
    from geomloss import SamplesLoss

    from dpgen.ot.sinkhorn import max_cost

    def geomloss_pair(w, x, y1, y2):
        rows = max(y1.shape[0], y2.shape[0])
        ws, ys = [], []
        for y in (y1, y2):
            b = torch.zeros(rows, dtype=y.dtype)
            b[:y.shape[0]] = 1.0 / y.shape[0]
            ws.append(b)
            ys.append(torch.cat([y, y.new_zeros(rows - y.shape[0], y.shape[1])]))
        a = torch.full((2, x.shape[0]), 1.0 / x.shape[0], dtype=x.dtype)
        loss = SamplesLoss("sinkhorn", p=1, blur=w.reg, scaling=w.scaling, diameter=w.diameter, debias=False,
                           cost=w._cost, backend="tensorized", reach=None)
        out = loss(a, x.expand(2, *x.shape), torch.stack(ws), torch.stack(ys))
        return out[0], out[1]

    d = 24
    w = EntropicOT(reg=0.05, scaling=scaling, diameter=max_cost("l1+l2", 1.0, 4.0 * d, 2.0 * d))
    g = torch.Generator().manual_seed(n + m1)
    rows, real = 2 * torch.rand(n + n // 2, d, generator=g, dtype=torch.float64) - 1, \
        2 * torch.rand(m1, d, generator=g, dtype=torch.float64) - 1
    for dtype, rtol in ((torch.float64, 1e-10), (torch.float32, 1e-6)):
        got = []
        for solve in (w.pair, partial(geomloss_pair, w)):
            xg, y = rows.to(dtype).requires_grad_(True), real.to(dtype)
            v = solve(xg[:n], y, xg[n // 2:n // 2 + n])
            got.append((torch.stack(v).detach(), torch.autograd.grad(2 * v[0] - v[1], xg)[0]))
        (v_new, g_new), (v_ref, g_ref) = got
        torch.testing.assert_close(v_new, v_ref, rtol=rtol, atol=0.0)
        if dtype == torch.float64:
            torch.testing.assert_close(g_new, g_ref, rtol=1e-10, atol=1e-10 * float(g_ref.abs().max()))


def test_one_sinkhorn_iteration_of_the_paired_solve_dispatches_six_kernels():
    """Both potentials of both loss terms take one soft-C-transform per temperature: the solve's kernels grow by
    6 per ε-scaling iteration (swap, log-weights + potentials, the scaled cost, log-sum-exp, the averaged update);
    GeomLoss' separate updates dispatched ~18."""
    from dpgen.bench.op_count import OpCounter
    from dpgen.ot.sinkhorn import epsilon_schedule

    g = torch.Generator().manual_seed(0)
    x, y1, y2 = torch.rand(10, 8, generator=g).requires_grad_(True), torch.rand(13, 8, generator=g), \
        torch.rand(10, 8, generator=g)
    counts = {}
    for scaling in (0.5, 0.9):
        w = EntropicOT(reg=0.05, scaling=scaling, diameter=100.0)
        with OpCounter() as c:
            torch.autograd.grad(sum(w.pair(x, y1, y2)), x)
        counts[len(epsilon_schedule(w.diameter, w.reg, scaling))] = c.kernels
    (short, k_short), (long, k_long) = sorted(counts.items())
    assert (k_long - k_short) == 6 * (long - short), counts


def test_the_semi_debiased_loss_with_a_public_diameter_reads_nothing_back_and_halves_the_kernels():
    """A fixed ε-scaling start: no value of the inputs is read back (counted as any device would take it),
    and the two terms share one Sinkhorn loop."""
    from dpgen.bench.op_count import OpCounter
    from dpgen.ot.sinkhorn import max_cost

    g = torch.Generator().manual_seed(0)
    xg, y = torch.rand(14, 8, generator=g).requires_grad_(True), torch.rand(9, 8, generator=g)
    w = EntropicOT(reg=0.05, scaling=0.9, diameter=max_cost("l1+l2", 1.0, 8.0, 8.0))
    with OpCounter() as joint:
        sinkhorn_generator_loss(w, xg, y, 10, "semi", ratio=0.4).backward()
    with OpCounter() as sep:
        (2 * w(xg[:10], y) - w(xg[:10], xg[4:14])).backward()
    assert joint.reads == 0 and sep.reads == 0
    assert joint.kernels < 0.6 * sep.kernels
    with OpCounter() as batch_scaled:  # without the constant, the start is read back from the inputs
        EntropicOT(reg=0.05, scaling=0.9)(xg[:10], y)
    assert batch_scaled.reads > 0
    assert max_cost("l1+l2", 1.0, 4.0 * 784 + 2 * 15 ** 2, 2.0 * 784 + 2 * 15) == 5184.0

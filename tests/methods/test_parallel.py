"""The split's room on one process (every share the whole, no collective) and what a method declares; the same
objects on two processes are compared with one process in tests/runs/test_distributed*.py."""

from __future__ import annotations

import pytest
import torch

from dpgen.methods import parallel
from dpgen.methods.dpsgd_classifier import DPSGDClassifier
from dpgen.methods.dpswd_generator import DPSWDGenerator
from dpgen.methods.dpswgen import DPSWGen
from dpgen.utils import dist


def test_one_process_shares_everything():
    assert parallel.Share.rows(10).bounds == (0, 10)
    assert parallel.Share.blocks(3, 4).bounds == (0, 12) and parallel.Share.blocks(3, 4).shared
    assert parallel.Share.directions(7).slice == slice(0, 7)
    assert parallel.Share.of_batch(5).n == 5
    x = torch.randn(4, 3)
    assert parallel.Share.rows(4).gather(x) is x


def test_the_smoothed_projection_of_a_share_is_its_rows_of_the_whole_one():
    x, u = torch.randn(6, 3), torch.randn(3, 5)
    torch.manual_seed(1)
    whole = parallel.Share.rows(6).projected(x, u, 0.5)
    torch.manual_seed(1)
    part = parallel.Share(2, 4, 6).projected(x[2:4], u, 0.5)
    torch.testing.assert_close(part, whole[2:4], rtol=0, atol=1e-6)


def test_the_batch_mean_gradient_is_the_mean_loss_gradient():
    net = torch.nn.Linear(3, 2)
    x, y = torch.randn(5, 3), torch.tensor([0, 1, 1, 0, 1])
    net.zero_grad()
    torch.nn.functional.cross_entropy(net(x), y).backward()
    want = [p.grad.clone() for p in net.parameters()]
    net.zero_grad(set_to_none=True)
    mean = parallel.batch_mean_backward(torch.nn.functional.cross_entropy(net(x), y, reduction="sum"), 5,
                                        net.parameters())
    for p, w in zip(net.parameters(), want, strict=True):
        torch.testing.assert_close(p.grad, w)
    assert float(mean) == pytest.approx(float(torch.nn.functional.cross_entropy(net(x), y)), rel=1e-6)


def test_the_parallel_optimizer_is_the_optimizer_on_one_process():
    w = torch.nn.Parameter(torch.ones(3))
    opt = parallel.ParallelOptimizer(torch.optim.SGD([w], lr=0.5), [w])
    opt.zero_grad(set_to_none=True)
    (w * 2).sum().backward()
    opt.step()
    torch.testing.assert_close(w.detach(), torch.zeros(3))
    assert opt.state_dict() == opt.optimizer.state_dict()


def test_every_method_declares_a_split():
    for cls in (DPSGDClassifier, DPSWDGenerator, DPSWGen):
        assert cls.split in parallel.SPLITS


def test_a_family_whose_split_does_not_pay_on_the_cpu_says_so_once(monkeypatch):
    method = DPSWGen.__new__(DPSWGen)
    assert parallel.slower_note(method, torch.device("cpu")) is None  # one process: nothing to say
    monkeypatch.setattr(dist, "active", lambda: True)
    monkeypatch.setattr(dist, "world_size", lambda: 2)
    line = parallel.slower_note(method, torch.device("cpu"))
    assert line.startswith("note: on 2 CPU processes DPSWgen") and "0.64x" in line and "\n" not in line
    assert parallel.slower_note(method, torch.device("cuda")) is None
    other = parallel.slower_note(DPSGDClassifier.__new__(DPSGDClassifier), torch.device("cpu"))  # every family says it
    assert other.startswith("note: on 2 CPU processes") and parallel.CPU_SPLIT_NOTE in other and "\n" not in other

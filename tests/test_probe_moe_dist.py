"""The probe on a tiny MoE (router tokens, expert entities, router gradient) and with torch.distributed (gloo)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import debugtune  # noqa: E402
from debugtune.engine.capture.hooks_router import count_tokens, expert_indices  # noqa: E402
from debugtune.engine.telemetry import read_run_json, read_telemetry  # noqa: E402
from debugtune.kg.records import location_kind  # noqa: E402

THRESHOLDS = {"probe.grad_tiny_eps": 1e-8}
E, K, D = 4, 2, 8


class Expert(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = torch.nn.Linear(D, 16)
        self.w2 = torch.nn.Linear(16, D)

    def forward(self, x):
        return self.w2(torch.relu(self.w1(x)))


class TinyMoE(torch.nn.Module):
    """A softmax top-k router over E experts; ``tuple_router`` makes the router return (weights, indices)."""

    def __init__(self, tuple_router: bool = False):
        super().__init__()
        self.gate = torch.nn.Linear(D, E, bias=False)
        self.experts = torch.nn.ModuleList(Expert() for _ in range(E))
        self.head = torch.nn.Linear(D, 1)
        self.tuple_router = tuple_router
        if tuple_router:
            self.gate.register_forward_hook(lambda m, i, o: torch.softmax(o, -1).topk(K, -1))

    def forward(self, x):
        routed = self.gate(x)
        weights, idx = routed if self.tuple_router else torch.softmax(routed, -1).topk(K, -1)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            hit = (idx == e).any(-1)
            if hit.any():
                w = (weights * (idx == e)).sum(-1, keepdim=True)[hit]
                out = out.index_add(0, hit.nonzero().squeeze(1), w * expert(x[hit]))
        return self.head(out)


@pytest.mark.parametrize("tuple_router", [False, True])
def test_tokens_per_expert_sum_to_tokens_times_top_k(tmp_path, tuple_router):
    torch.manual_seed(4)
    model = TinyMoE(tuple_router)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    tokens = 24
    expected, gate_grads = [], []
    with debugtune.attach(model, opt, tmp_path / "run", hardware=False, thresholds=THRESHOLDS) as probe:
        probe.watch_router(model.gate, E, K)
        for _ in range(3):
            x = torch.randn(tokens, D)
            with torch.no_grad():
                idx = torch.softmax(x @ model.gate.weight.t(), -1).topk(K, -1)[1]  # not via gate: no hook
            expected.append(np.bincount(idx.flatten().numpy(), minlength=E))
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            gate_grads.append(float(model.gate.weight.grad.double().norm()))
            opt.step()
    tel = read_telemetry(tmp_path / "run")
    steps, names, grid = tel.pivot("expert_tokens")
    assert names == [f"gate/expert:{i}" for i in range(E)]
    assert steps.tolist() == [0, 1, 2]
    assert grid.sum(axis=1).tolist() == [tokens * K] * 3
    np.testing.assert_array_equal(grid, np.array(expected))
    assert all(location_kind(n) == "expert" for n in names)
    np.testing.assert_allclose(tel.series("router_grad_norm", "gate")[1], gate_grads, rtol=1e-9)
    # expert parameters are grouped as experts (module paths containing experts.<i>)
    expert_entities = [n for n in tel.entities("grad_norm") if location_kind(n) == "expert"]
    assert sorted(expert_entities) == [f"expert:{i}" for i in range(E)]
    assert read_run_json(tmp_path / "run")["probe"]["routers"] == ["gate"]


def test_router_output_shapes():
    logits = torch.tensor([[[3.0, 1.0, 2.0, 0.0]], [[0.0, 0.1, 0.2, 5.0]]])  # [2, 1, E]: leading dims = tokens
    idx = expert_indices(logits, E, 2)
    assert count_tokens(idx, E).tolist() == [1, 0, 2, 1]
    ind = torch.tensor([[0, 3], [3, 3]])
    assert count_tokens(expert_indices((torch.ones(2, 2), ind, logits), E, 2), E).tolist() == [1, 0, 0, 3]
    with pytest.raises(ValueError):
        expert_indices(torch.ones(3, 7), E, 2)


@pytest.fixture
def gloo(tmp_path):
    import torch.distributed as dist

    if not dist.is_available():
        pytest.skip("torch.distributed not available")
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield dist
    dist.destroy_process_group()


def test_collectives_are_timed_with_bytes_and_restored(tmp_path, gloo):
    dist = gloo
    original = dist.all_reduce
    model = torch.nn.Linear(5, 5)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with debugtune.attach(model, opt, tmp_path / "run", hardware=False, thresholds=THRESHOLDS):
        assert dist.all_reduce is not original
        for _ in range(2):
            model(torch.randn(3, 5)).sum().backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            gathered = [torch.zeros(7, dtype=torch.float64)]
            dist.all_gather(gathered, torch.ones(7, dtype=torch.float64))
            opt.step()
            opt.zero_grad()
    assert dist.all_reduce is original
    tel = read_telemetry(tmp_path / "run")
    assert tel.series("collective_bytes", "allreduce")[1].tolist() == [30 * 4] * 2
    assert tel.series("collective_count", "allreduce")[1].tolist() == [2, 2]
    assert tel.series("collective_bytes", "allgather")[1].tolist() == [7 * 8] * 2
    assert np.all(tel.series("comm_ms")[1] > 0)
    assert read_run_json(tmp_path / "run")["probe"]["collectives_timed"] is True

"""The trainer's device options (focalcal.lab.train): torch.compile, the device, throughput and loader
records, loader workers and pinned memory."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
import torch
from torch import nn

from focalcal.lab.data.loaders import MAX_AUTO_WORKERS, resolve_num_workers
from focalcal.lab.train import Trainer, TrainSettings, train


def _tiny_problem(n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
    ds = torch.utils.data.TensorDataset(x, y)
    return (torch.utils.data.DataLoader(ds, batch_size=16, shuffle=True,
                                        generator=torch.Generator().manual_seed(seed)),
            torch.utils.data.DataLoader(ds, batch_size=32))


class _MLP(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
        self.fc = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc(self.body(x))


def _fit(tmp_path: Path, **settings):
    tr, ev = _tiny_problem()
    return train(_MLP(), nn.functional.cross_entropy, tr, val_loader=ev, test_loader=ev,
                 out_dir=tmp_path, config={"x": 1}, epochs=2, progress=False, lr=0.1, **settings)


def _strip_timing(history):
    return [{k: v for k, v in r.items() if k not in ("time_s", "throughput")} for r in history]


def test_compile_reaches_torch_compile_and_trains_as_eager(tmp_path, monkeypatch):
    # torch.compile with the "eager" backend: dynamo traces the model (its feature hook included),
    # without inductor's C++ build, so the test takes seconds on a CPU
    calls = []
    real = torch.compile

    def spy(model, **kw):
        calls.append(model)
        return real(model, backend="eager")

    monkeypatch.setattr(torch, "compile", spy)
    compiled = _fit(tmp_path / "c", compile=True)
    eager = _fit(tmp_path / "e")
    assert len(calls) == 1 and isinstance(calls[0], _MLP)
    assert _strip_timing(compiled.history) == _strip_timing(eager.history)
    assert torch.equal(compiled.test_logits, eager.test_logits)
    cfg_c = json.loads((tmp_path / "c" / "config.json").read_text())
    cfg_e = json.loads((tmp_path / "e" / "config.json").read_text())
    assert cfg_c["trainer"]["compile"] is True and cfg_e["trainer"]["compile"] is False
    # the checkpoint holds the eager module's parameters (no "_orig_mod." prefix)
    ck = torch.load(tmp_path / "c" / "checkpoint.pt", weights_only=False)
    assert set(ck["model"]) == set(_MLP().state_dict())
    with pytest.raises(ValueError, match="compile"):
        TrainSettings(epochs=1, compile="yes")


def test_compile_with_inductor_on_the_cpu_matches_eager(tmp_path):
    # the real torch.compile (inductor builds C++ kernels: about 20 s on 2 cores); float
    # reassociation in the fused kernels allows differences at float32 rounding level
    compiled = _fit(tmp_path / "c", compile=True)
    eager = _fit(tmp_path / "e")
    torch.testing.assert_close(compiled.test_logits, eager.test_logits, rtol=1e-5, atol=1e-5)
    for rec_c, rec_e in zip(compiled.history, eager.history):
        assert rec_c["test_nll"] == pytest.approx(rec_e["test_nll"], rel=1e-5)


def test_device_and_throughput_are_recorded(tmp_path):
    r = _fit(tmp_path)
    assert all(rec["throughput"] > 0 for rec in r.history)
    cfg = json.loads((tmp_path / "config.json").read_text())
    hw = cfg["hardware"]
    assert hw["device"] == "cpu" and hw["device_name"] == "cpu"
    assert hw["throughput"] == pytest.approx(statistics.median(rec["throughput"] for rec in r.history))
    assert "loader" not in cfg  # no workers, no pinned memory: nothing recorded


def test_device_name_on_cuda_is_the_gpus_name(monkeypatch):
    from focalcal.lab import records

    monkeypatch.setattr(records, "select_device", lambda d: torch.device("cuda:0"))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d: "NVIDIA H100 80GB HBM3")
    assert records.device_name("cuda") == "NVIDIA H100 80GB HBM3"


def test_loader_workers_and_pinned_memory_are_recorded(tmp_path):
    tr, ev = _tiny_problem()
    tr = torch.utils.data.DataLoader(tr.dataset, batch_size=16, shuffle=True, num_workers=1,
                                     generator=torch.Generator().manual_seed(0))
    Trainer(_MLP(), nn.functional.cross_entropy, TrainSettings(epochs=1), out_dir=tmp_path,
            progress=False).fit(tr, val_loader=ev)
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["loader"] == {"num_workers": 1, "pin_memory": False}


def test_resolve_num_workers(monkeypatch):
    assert resolve_num_workers("auto", "cpu") == 0
    assert resolve_num_workers(3, "cpu") == 3
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(32)), raising=False)
    assert resolve_num_workers("auto", torch.device("cuda")) == MAX_AUTO_WORKERS
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert resolve_num_workers("auto", "cuda") == 2
    for bad in ("many", -1):
        with pytest.raises(ValueError, match="num_workers"):
            resolve_num_workers(bad, "cpu")

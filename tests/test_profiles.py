"""The profiles cpu / gpu / paper: one results format; the gpu profile shrunk and run on the CPU; the
trainer's GPU options (workers, pinned memory, torch.compile, device and throughput records); the
SLURM executor's parameters."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch import nn

from focalcal.lab import profiles, runfolder, spec, sweep, template
from focalcal.lab.data.loaders import MAX_AUTO_WORKERS, resolve_num_workers
from focalcal.lab.train import Trainer, TrainSettings, train

# files every finished run has, whatever its profile (logits_epoch_<n>.pt and curvature.json only
# where a block asks for them)
RUN_FILES = {"spec.json", "train_classifier.ipynb", "posthoc_calibration.ipynb", "run.log", "result.json",
             "config.json", "history.json", "logits.pt", "calibration.json", "checkpoint.pt"}


# ---------------------------------------------------------------------------------- profiles ---

def test_gpu_profile_is_the_papers_networks_on_cifar_with_one_seed():
    runs = profiles.PROFILES["gpu"].expand()
    nets = [r for r in runs if r.model != "mlp"]
    assert {r.dataset for r in nets} == {"cifar10", "cifar100"}
    assert {r.model for r in nets} == {"resnet50", "wide_resnet26_10"}
    assert {r.seed for r in nets} == {0}
    # every loss of the cpu profile's Fashion-MNIST comparison, on CIFAR-10 ResNet-50 (FLSc-531's
    # gamma steps rescaled to the schedule)
    c10 = {r.loss.display for r in nets if (r.dataset, r.model) == ("cifar10", "resnet50")}
    assert {lo.display for lo in profiles.FMNIST_LOSSES} <= c10
    main = [r for r in nets if dict(r.train)["epochs"] == 60]
    settings = template.train_settings(dict(main[0].train)["schedule"], epochs=60)
    assert settings["milestones"] == (26, 43)  # the papers' drops at 150/350 and 250/350


def test_paper_profile_is_the_full_grid():
    runs = profiles.PROFILES["paper"].expand()
    cifar = [r for r in runs if r.dataset.startswith("cifar") and r.model != "mlp"
             and dict(r.train)["epochs"] == 350]
    assert {r.model for r in cifar} == {"resnet50", "resnet110", "wide_resnet26_10", "densenet121"}
    assert {r.seed for r in cifar} == {0, 1, 2, 3, 4}
    assert {r.loss.display for r in cifar} == {lo.display for lo in profiles.FMNIST_LOSSES + profiles.SELECTIVE_VARIANT_LOSSES}
    assert any(r.dataset == "tiny_imagenet" for r in runs)


def test_shrink_keeps_the_structure_and_the_pages_losses():
    small = profiles.shrink(profiles.PROFILES["gpu"])
    runs = small.expand()
    assert len(runs) < 25
    assert {(r.dataset, r.model) for r in runs} == {(r.dataset, r.model) for r in profiles.PROFILES["gpu"].expand()
                                                   if r.loss in profiles.page_losses()}
    for r in runs:
        t = dict(r.train)
        assert t["epochs"] == 1 and t["eval_subset"] == 32 and r.seed == 0
        assert t.get("logits_epochs", [1]) == [1]
        if r.model == "wide_resnet26_10":
            assert dict(r.model_params) == {"depth": 8, "width": 1}
    # the Psi chapter's full and small-data settings stay apart
    psi = {dict(r.train)["train_subset"] for r in runs if dict(r.model_params).get("hidden") == [512, 512]}
    assert psi == {32, 16}
    with pytest.raises(ValueError, match="batch_size"):
        profiles.shrink(profiles.PROFILES["gpu"], batch_size=0)


def test_shrink_from_the_command_line(capsys, tmp_path):
    assert sweep.main(["--profile", "gpu", "--shrink", "--list", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "cifar100" in out and "wide_resnet26_10" in out and out.count("pending") == len(
        profiles.shrink(profiles.PROFILES["gpu"]).expand())
    assert runfolder.default_out("gpu", shrunk=True) == Path("runs", "gpu-shrunk")


def test_every_profile_has_a_block_for_every_page():
    # the same book from any profile: each has runs of every role, each run one role, and a
    # shrunk profile keeps them
    for name in ("smoke", "cpu", "gpu", "paper"):
        profile = profiles.PROFILES[name]
        roles = profile.roles()
        assert set(roles) == set(spec.ROLES), name
        assert sum(map(len, roles.values())) == len(profile.expand()), name
        if name in ("gpu", "paper"):  # the profiles that shrink() is for
            assert set(profiles.shrink(profile).roles()) == set(spec.ROLES), name
    # the page's main setting (runs_for's setting="first") is listed first: CIFAR-10 on ResNet-50
    first = profiles.PROFILES["gpu"].runs_of("comparison")[0]
    assert (first.dataset, first.model) == ("cifar10", "resnet50")
    # a run is what it trains: the role is not part of its id
    ce = [spec.loss("ce")]
    assert (spec.Block(["cifar10"], ["resnet50"], ce, [0], role="length").expand()
            == spec.Block(["cifar10"], ["resnet50"], ce, [0]).expand())
    with pytest.raises(ValueError, match="role must be one of comparison, synthetic"):
        spec.Block(["cifar10"], ["resnet50"], ce, [0], role="table1")
    with pytest.raises(ValueError, match="role must be one of"):
        profiles.PROFILES["cpu"].runs_of("table1")


@pytest.mark.notebooks
def test_shrunk_gpu_profile_runs_on_the_cpu_in_the_cpu_profiles_format(gpu_shrunk_runs, smoke_runs):
    gpu = pd.read_csv(gpu_shrunk_runs / "results.csv")
    smoke = pd.read_csv(smoke_runs / "results.csv")  # the cpu profile's code path, at smoke size
    expected = {r.run_id for r in profiles.shrink(profiles.PROFILES["gpu"]).expand()}
    assert set(gpu["run"]) == expected
    assert {"cifar10", "cifar100"} <= set(gpu["dataset"])
    # the same columns (a loss parameter column exists where some run has that parameter)
    plain = lambda cols: [c for c in cols if not c.startswith("param_")]  # noqa: E731
    assert plain(gpu.columns) == plain(smoke.columns)
    assert set(gpu.columns) <= set(smoke.columns)
    assert set(gpu["method"]) == set(smoke["method"])
    for run in expected:
        folder = gpu_shrunk_runs / "runs" / run
        files = {p.name for p in folder.iterdir()}
        assert RUN_FILES <= files, (run, RUN_FILES - files)
        history = json.loads((folder / "history.json").read_text())["records"]
        config = json.loads((folder / "config.json").read_text())
        assert config["hardware"]["device_name"] == "cpu" and config["hardware"]["throughput"] > 0
        assert history[-1]["throughput"] > 0
    # the per-epoch records have the smoke runs' fields
    smoke_run = next(p for p in (smoke_runs / "runs").iterdir() if p.name.startswith("fashion_mnist-cnn-cross"))
    gpu_run = gpu_shrunk_runs / "runs" / next(r for r in expected if r.startswith("cifar10-resnet50-cross"))
    keys = lambda p: set(json.loads((p / "history.json").read_text())["records"][-1])  # noqa: E731
    assert keys(gpu_run) == keys(smoke_run)


# ------------------------------------------------------------------------------- the trainer ---

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


# ----------------------------------------------------------------------------- SLURM executor ---

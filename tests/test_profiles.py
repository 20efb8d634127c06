"""The profiles cpu / gpu / paper (focalcal.lab.profiles): one results format, every page's blocks, the
gpu profile shrunk and run on the CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from focalcal.lab import profiles, runfolder, spec, sweep, template

# files every finished run has, whatever its profile (logits_epoch_<n>.pt and curvature.json only
# where a block asks for them)
RUN_FILES = {"spec.json", "train_classifier.ipynb", "posthoc_calibration.ipynb", "run.log", "result.json",
             "config.json", "history.json", "logits.pt", "calibration.json", "checkpoint.pt"}


# ---------------------------------------------------------------------------------- profiles ---

def test_gpu_profile_is_the_papers_networks_on_cifar_with_one_seed():
    runs = profiles.PROFILES["gpu"].expand()
    nets = [r for r in runs if r.model not in ("mlp", "resnet8")]
    assert {r.dataset for r in nets} == {"cifar10", "cifar100"}
    assert {r.model for r in nets} == {"resnet50", "wide_resnet26_10"}
    assert {r.seed for r in nets} == {0}
    # the architecture role: ResNet-8 across the curvature page's gammas, on CIFAR-10, two seeds
    small = [r for r in runs if r.model == "resnet8"]
    assert {r.dataset for r in small} == {"cifar10"} and {r.seed for r in small} == {0, 1}
    assert sorted({r.loss.params for r in small}) == [(("gamma", g),) for g in profiles.ARCHITECTURE_GAMMAS]
    assert set(profiles.PROFILES["gpu"].runs_of("architecture")) == set(small)
    # every loss of the cpu profile's Fashion-MNIST comparison, on CIFAR-10 ResNet-50 (FLSc-531's
    # gamma steps rescaled to the schedule)
    c10 = {r.loss.display for r in nets if (r.dataset, r.model) == ("cifar10", "resnet50")}
    assert {lo.display for lo in profiles.FMNIST_LOSSES} <= c10
    main = [r for r in nets if dict(r.train)["epochs"] == 60]
    settings = template.train_settings(dict(main[0].train)["schedule"], epochs=60)
    assert settings["milestones"] == (26, 43)  # the papers' drops at 150/350 and 250/350


def test_paper_profile_is_the_full_grid():
    paper = profiles.PROFILES["paper"]
    runs = paper.expand()
    cifar = [r for r in paper.runs_of("comparison") if r.dataset.startswith("cifar") and r.model != "mlp"
             and dict(r.train)["epochs"] == 350]
    assert {r.model for r in cifar} == {"resnet50", "resnet110", "wide_resnet26_10", "densenet121"}
    assert {r.seed for r in cifar} == {0, 1, 2, 3, 4}
    assert {r.loss.display for r in cifar} == {lo.display for lo in profiles.FMNIST_LOSSES + profiles.SELECTIVE_VARIANT_LOSSES}
    assert any(r.dataset == "tiny_imagenet" for r in runs)
    # the settings changed beside the comparison (label smoothing 0.1, the other confidence scores)
    ablation = paper.runs_of("ablation")
    assert {r.loss.display for r in ablation} == {lo.display for lo in (profiles.LABEL_SMOOTHING_01, *profiles.CSF_LOSSES)}
    assert {(r.dataset, r.model, dict(r.train)["epochs"]) for r in ablation} == {("cifar10", "resnet50", 350)}


def test_shrink_keeps_the_structure_and_the_pages_losses():
    small = profiles.shrink(profiles.PROFILES["gpu"])
    runs = small.expand()
    # at most two losses and one seed per block: a few runs per block of the gpu profile
    assert all(len(b.losses) <= 2 and len(list(b.seeds)) == 1 for b in small.blocks)
    assert len(runs) == sum(len(b.datasets) * len(b.models) * len(b.losses) for b in small.blocks) < 30
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

"""Trainer: determinism, resume equivalence, atomic writes, loss protocols, records."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import torch
from torch import nn

import focalcal.lab.io as fio
from focalcal.lab import runfolder
from focalcal.lab import train as T
from focalcal.lab.data import make_loaders
from focalcal.metrics import ece
from focalcal.lab.models import make_model
from focalcal.lab.train import (GRAD_NORM_EDGES, PAPER_SCHEDULE, SCHEDULES, LossHooks, Trainer,
                                TrainSettings, prediction_stats, select_device, train)
from focalcal.losses import make_loss

DATA = dict(n=192, n_classes=3, dim=2, separation=2.0)


def _loaders(seed=0, batch_size=32):
    return make_loaders("gaussian_mixture", batch_size, seed=seed, **DATA)


class DropoutNet(nn.Module):
    """Consumes torch's global RNG in every training step (dropout)."""

    def __init__(self, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.body = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Dropout(0.3))
        self.fc = nn.Linear(16, 3)

    def forward(self, x):
        return self.fc(self.body(x))


def _strip_time(history):
    # the timings (the epoch's seconds, the training throughput) differ between identical runs
    return [{k: v for k, v in r.items() if k not in ("time_s", "throughput")} for r in history]


SGD = dict(optimizer="sgd", lr=0.2, momentum=0.9, weight_decay=5e-4, milestones=[1], progress=False)


@pytest.fixture(autouse=True)
def on_the_cpu(monkeypatch):
    """The trainer's ``device="auto"`` is the CPU in these tests, on a GPU machine too: they compare
    runs bit for bit and against float64 references, which CUDA's non-deterministic kernels and
    bfloat16 autocast do not reproduce. The CUDA path is checked by ``bench/on_a_gpu.sh``."""
    real = T.select_device
    monkeypatch.setattr(T, "select_device", lambda device="auto": real("cpu" if device == "auto" else device))


# ------------------------------------------------------------------------------------- device ---

def test_select_device_auto():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert select_device("auto").type == expected
    assert select_device("cpu") == torch.device("cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device='cuda' requested but CUDA"):
            select_device("cuda")
    with pytest.raises(ValueError, match="device"):
        select_device("gpu0")


# ------------------------------------------------------------------------------- determinism ---

def test_same_seed_same_run():
    runs = []
    for _ in range(2):
        ld = _loaders()
        runs.append(train(DropoutNet(), nn.CrossEntropyLoss(), ld.train, val_loader=ld.val,
                          test_loader=ld.test, epochs=2, seed=3, **SGD))
    a, b = runs
    assert _strip_time(a.history) == _strip_time(b.history)
    assert torch.equal(a.val_logits, b.val_logits) and torch.equal(a.test_logits, b.test_logits)
    for pa, pb in zip(a.model.parameters(), b.model.parameters()):
        assert torch.equal(pa, pb)
    ld = _loaders()
    c = train(DropoutNet(), nn.CrossEntropyLoss(), ld.train, val_loader=ld.val, epochs=2, seed=4, **SGD)
    assert not torch.equal(a.val_logits, c.val_logits)


# ------------------------------------------------------------------------------------- resume ---

class KilledLoss(nn.Module):
    """Cross-entropy that dies (as if the process were killed) after ``n`` calls."""

    def __init__(self, n):
        super().__init__()
        self.n = n

    def forward(self, logits, target):
        self.n -= 1
        if self.n < 0:
            raise KeyboardInterrupt("simulated kill")
        return nn.functional.cross_entropy(logits, target)


def test_resume_equals_uninterrupted(tmp_path):
    ld = _loaders()
    full = train(DropoutNet(), nn.CrossEntropyLoss(), ld.train, val_loader=ld.val, test_loader=ld.test,
                 epochs=2, seed=1, out_dir=tmp_path / "full", **SGD)

    ld = _loaders()
    with pytest.raises(KeyboardInterrupt):
        # 6 batches per epoch: dies in the middle of the second epoch
        train(DropoutNet(), KilledLoss(9), ld.train, val_loader=ld.val, test_loader=ld.test,
              epochs=2, seed=1, out_dir=tmp_path / "cut", **SGD)
    ck = fio.torch_load(tmp_path / "cut" / "checkpoint.pt")
    assert ck["epoch"] == 1 and len(ck["history"]) == 1
    assert not (tmp_path / "cut" / "logits.pt").exists()
    assert (tmp_path / "cut" / "config.json").exists()

    # a fresh process: new loaders, a differently initialised model, the seed does not matter
    ld = _loaders(seed=99)
    resumed = train(DropoutNet(seed=5), nn.CrossEntropyLoss(), ld.train, val_loader=ld.val,
                    test_loader=ld.test, epochs=2, seed=123, out_dir=tmp_path / "cut", **SGD)
    assert resumed.resumed_from == 1
    for pa, pb in zip(full.model.parameters(), resumed.model.parameters()):
        assert torch.equal(pa, pb)
    assert torch.equal(full.test_logits, resumed.test_logits)
    assert torch.equal(full.val_logits, resumed.val_logits)
    assert _strip_time(full.history) == _strip_time(resumed.history)
    saved = fio.torch_load(tmp_path / "cut" / "logits.pt")
    assert torch.equal(saved["test_logits"], full.test_logits)

    # resuming a finished run does no training and returns the same logits
    again = train(DropoutNet(seed=7), nn.CrossEntropyLoss(), ld.train, val_loader=ld.val,
                  test_loader=ld.test, epochs=2, out_dir=tmp_path / "cut", **SGD)
    assert again.resumed_from == 2 and torch.equal(again.test_logits, full.test_logits)


def test_resume_rejects_other_config(tmp_path):
    ld = _loaders()
    train(DropoutNet(), nn.CrossEntropyLoss(), ld.train, epochs=1, out_dir=tmp_path,
          config={"loss": "ce"}, **SGD)
    with pytest.raises(ValueError, match="belongs to a run with another config"):
        train(DropoutNet(), nn.CrossEntropyLoss(), ld.train, epochs=1, out_dir=tmp_path,
              config={"loss": "focal"}, **SGD)
    # resume=False starts afresh
    r = train(DropoutNet(), nn.CrossEntropyLoss(), ld.train, epochs=1, out_dir=tmp_path,
              config={"loss": "focal"}, resume=False, **SGD)
    assert r.resumed_from == 0


# ------------------------------------------------------------------------------ atomic writes ---

def test_atomic_write_crash_leaves_old_file(tmp_path):
    p = tmp_path / "r.json"
    fio.atomic_write_json(p, {"v": 1})

    def dies(f):
        f.write(b'{"v": 2, "trunc')
        raise KeyboardInterrupt("killed mid-write")

    with pytest.raises(KeyboardInterrupt):
        fio.atomic_write(p, dies)
    assert json.loads(p.read_text()) == {"v": 1}
    assert sorted(os.listdir(tmp_path)) == ["r.json"]
    # a value that cannot be serialised never touches the file
    with pytest.raises(ValueError):
        fio.atomic_write_json(p, {"v": float("nan")})
    assert json.loads(p.read_text()) == {"v": 1}
    fio.atomic_write_text(tmp_path / "t.txt", "hello")
    fio.atomic_write_bytes(tmp_path / "b.bin", b"\x00\x01")
    assert (tmp_path / "t.txt").read_text() == "hello" and (tmp_path / "b.bin").read_bytes() == b"\x00\x01"
    with pytest.raises(ValueError, match="data must be bytes"):
        fio.atomic_write_bytes(tmp_path / "b.bin", "text")


def test_atomic_torch_save_crash(tmp_path, monkeypatch):
    p = tmp_path / "x.pt"
    fio.atomic_torch_save({"a": torch.ones(3)}, p)
    real_save = torch.save

    def half_save(obj, f, *a, **k):
        f.write(b"PK\x03\x04 partial")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", half_save)
    with pytest.raises(OSError):
        fio.atomic_torch_save({"a": torch.zeros(3)}, p)
    monkeypatch.setattr(torch, "save", real_save)
    assert torch.equal(fio.torch_load(p)["a"], torch.ones(3))
    assert os.listdir(tmp_path) == ["x.pt"]


def test_trainer_crash_while_checkpointing_keeps_last_checkpoint(tmp_path, monkeypatch):
    real_save = torch.save
    calls = []

    def save_then_die(obj, f, *a, **k):
        calls.append(1)
        if len(calls) == 2:  # the second checkpoint (after epoch 2)
            f.write(b"garbage")
            raise KeyboardInterrupt("killed while writing")
        return real_save(obj, f, *a, **k)

    monkeypatch.setattr(torch, "save", save_then_die)
    ld = _loaders()
    with pytest.raises(KeyboardInterrupt):
        train(DropoutNet(), nn.CrossEntropyLoss(), ld.train, val_loader=ld.val, epochs=3,
              out_dir=tmp_path, **SGD)
    monkeypatch.setattr(torch, "save", real_save)
    assert fio.torch_load(tmp_path / "checkpoint.pt")["epoch"] == 1
    assert sorted(os.listdir(tmp_path)) == ["checkpoint.pt", "config.json", "history.json"]
    assert len(json.loads((tmp_path / "history.json").read_text())["records"]) == 1


# ------------------------------------------------------------------------------ loss protocols ---

class AdaFocalLike(nn.Module):
    """Stand-in for AdaFocal: a state buffer updated from validation logits once per epoch."""

    def __init__(self):
        super().__init__()
        self.register_buffer("gamma", torch.tensor(1.0))
        self.updates, self.epochs = [], []

    def set_epoch(self, epoch):
        self.epochs.append(epoch)

    def update(self, val_logits, val_labels):
        self.updates.append((val_logits.clone(), val_labels.clone()))
        self.gamma += (val_logits.argmax(1) != val_labels).double().mean().float()

    def forward(self, logits, target):
        logp = torch.log_softmax(logits, -1).gather(1, target[:, None]).squeeze(1)
        return (-(1 - logp.exp()) ** self.gamma * logp).mean()


def test_update_and_set_epoch_protocol(tmp_path):
    ld = _loaders()
    loss = AdaFocalLike()
    r = train(DropoutNet(), loss, ld.train, val_loader=ld.val, epochs=3, out_dir=tmp_path, **SGD)
    assert loss.epochs == [0, 1, 2] and len(loss.updates) == 3
    z, y = loss.updates[-1]
    assert z.shape == (192, 3) and torch.equal(z, r.val_logits) and torch.equal(y, r.val_labels)
    expected = 1.0 + sum(float((u.argmax(1) != v).double().mean()) for u, v in loss.updates)
    assert loss.gamma.item() == pytest.approx(expected, rel=1e-6)
    # the loss state is checkpointed and restored on resume
    ck = fio.torch_load(tmp_path / "checkpoint.pt")
    assert ck["loss"]["gamma"].item() == pytest.approx(expected, rel=1e-6)
    fresh = AdaFocalLike()
    train(DropoutNet(), fresh, ld.train, val_loader=ld.val, epochs=3, out_dir=tmp_path, **SGD)
    assert fresh.gamma.item() == pytest.approx(expected, rel=1e-6) and fresh.updates == []
    with pytest.raises(ValueError, match="val_loader"):
        train(DropoutNet(), AdaFocalLike(), ld.train, epochs=1, **SGD)


class ModelAwareLoss(nn.Module):
    """Stand-in for a loss with ``requires_model``: CE + an L2 penalty on the weights."""

    requires_model = True

    def __init__(self):
        super().__init__()
        self.seen = []

    def forward(self, logits, target, *, model, inputs):
        self.seen.append((model, inputs.shape))
        assert torch.allclose(model(inputs), logits)
        penalty = sum(p.pow(2).sum() for p in model.parameters())
        return nn.functional.cross_entropy(logits, target) + 1e-3 * penalty


def test_requires_model_protocol():
    ld = _loaders()
    loss = ModelAwareLoss()
    net = make_model("mlp", 3, 2, seed=0)
    r = train(net, loss, ld.train, epochs=1, **SGD)
    assert len(loss.seen) == 6 and all(m is net for m, _ in loss.seen)
    assert all(s[1:] == (2,) for _, s in loss.seen)
    # the loss ran the model a second time: the recorded gradient norms still use the first pass
    assert sum(r.history[0]["grad_norm_hist"]) == 192



def test_loss_hooks_declared_by_the_losses():
    """The library's losses declare their needs through the trainer's protocols."""
    assert LossHooks.of(nn.CrossEntropyLoss()) == LossHooks()
    assert LossHooks.of(_focal) == LossHooks()
    ada = make_loss("adafocal")
    assert LossHooks.of(ada).on_epoch_end == ada.update and LossHooks.of(ada).on_epoch_start is None
    flsc = make_loss("flsc531")
    assert LossHooks.of(flsc).on_epoch_start == flsc.set_epoch and LossHooks.of(flsc).on_epoch_end is None
    assert LossHooks.of(make_loss("hessian_trace")).needs_model
    assert LossHooks.of(ModelAwareLoss()).needs_model and not LossHooks.of(make_loss("focal")).needs_model


def test_explicit_hooks_replace_the_declared_ones():
    """hooks= gives the trainer other callables; the loss's own set_epoch/update are then not called."""
    ld = _loaders()
    loss, started, ended = AdaFocalLike(), [], []
    hooks = LossHooks(on_epoch_start=started.append, on_epoch_end=lambda z, y: ended.append(z.shape))
    train(DropoutNet(), loss, ld.train, val_loader=ld.val, epochs=2, hooks=hooks, **SGD)
    assert started == [0, 1] and ended == [(192, 3)] * 2
    assert loss.epochs == [] and loss.updates == []


def test_trainer_equals_train(tmp_path):
    """train(...) is Trainer(..., TrainSettings(...)).fit(...): the same records, logits and files."""
    ld = _loaders()
    a = train(DropoutNet(), make_loss("flsc531", milestones=(1, 2)), ld.train, val_loader=ld.val,
              test_loader=ld.test, epochs=2, seed=2, out_dir=tmp_path / "a", **SGD)
    ld = _loaders()
    settings = TrainSettings(epochs=2, seed=2, **{k: v for k, v in SGD.items() if k != "progress"})
    trainer = Trainer(DropoutNet(), make_loss("flsc531", milestones=(1, 2)), settings,
                      out_dir=tmp_path / "b", progress=False)
    b = trainer.fit(ld.train, val_loader=ld.val, test_loader=ld.test)
    assert _strip_time(a.history) == _strip_time(b.history) and a.settings == b.settings
    assert torch.equal(a.test_logits, b.test_logits)
    ha, hb = (json.loads((tmp_path / d / "history.json").read_text()) for d in "ab")
    assert _strip_time(ha["records"]) == _strip_time(hb["records"])
    assert settings.milestones == (1,) and a.settings["milestones"] == [1]

# ------------------------------------------------------------------------------------ records ---

def test_records_present_and_sane(tmp_path):
    ld = _loaders()
    r = train(make_model("mlp", 3, 2, seed=0), nn.CrossEntropyLoss(), ld.train, val_loader=ld.val,
              test_loader=ld.test, train_eval_loader=ld.val, epochs=3, out_dir=tmp_path,
              config={"name": "records"}, **{**SGD, "milestones": [1, 2]})
    assert [h["lr"] for h in r.history] == pytest.approx([0.2, 0.02, 0.002])
    for h in r.history:
        for s in ("train", "val", "test", "train_eval"):
            acc, nll, ent = h[f"{s}_accuracy"], h[f"{s}_nll"], h[f"{s}_entropy"]
            assert 0 <= acc <= 1 and h[f"{s}_error"] == pytest.approx(1 - acc)
            assert 0 <= ent <= math.log(3) + 1e-12 and 0 <= h[f"{s}_ece"] <= 1
            # the overall mean is the weighted mean of the two groups
            if h[f"{s}_nll_incorrect"] is not None and h[f"{s}_nll_correct"] is not None:
                assert nll == pytest.approx(acc * h[f"{s}_nll_correct"] + (1 - acc) * h[f"{s}_nll_incorrect"])
                assert h[f"{s}_nll_correct"] < h[f"{s}_nll_incorrect"]
        assert sum(h["grad_norm_hist"]) == 192 and len(h["grad_norm_hist"]) == len(GRAD_NORM_EDGES) - 1
        q = h["grad_norm_quantiles"]
        assert q["5"] <= q["25"] <= q["50"] <= q["75"] <= q["95"]
        assert h["feature_norm"] > 0 and h["train_loss"] > 0
    assert r.history[-1]["weight_norm"] == pytest.approx(float(r.model.fc.weight.detach().norm()))
    assert r.history[-1]["test_ece"] == pytest.approx(ece(logits=r.test_logits, labels=r.test_labels))
    # files
    hist = json.loads((tmp_path / "history.json").read_text())
    assert hist["grad_norm_edges"] == pytest.approx(GRAD_NORM_EDGES)
    assert _strip_time(hist["records"]) == _strip_time(r.history)
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["config"] == {"name": "records"} and cfg["trainer"]["lr"] == 0.2
    assert cfg["model"]["class"] == "MLP" and cfg["data"]["train"] == 192
    logits = torch.load(tmp_path / "logits.pt", weights_only=True)
    assert logits["val_logits"].shape == (192, 3) and logits["test_labels"].dtype == torch.int64
    assert torch.equal(logits["val_logits"], r.val_logits)


def _focal(logits, target, gamma=2.0):
    logp = torch.log_softmax(logits, -1).gather(1, target[:, None]).squeeze(1)
    return (-(1 - logp.exp()) ** gamma * logp).mean()


@pytest.mark.parametrize("loss_fn", [nn.CrossEntropyLoss(), _focal])
def test_grad_norms_match_per_sample_autograd(loss_fn):
    """Closed form B ||dL/dz_i|| sqrt(||h_i||^2 + 1) against per-sample autograd (torch.func)."""
    ld = make_loaders("gaussian_mixture", 192, seed=0, **DATA)  # one batch: norms of the initial net
    net = make_model("mlp", 3, 2, seed=1, hidden=(8,))
    params = {k: v.detach().clone() for k, v in net.named_parameters()}
    x, y = next(iter(ld.train))

    def one_loss(p, xi, yi):
        z = torch.func.functional_call(net, p, (xi[None],))
        return loss_fn(z, yi[None])

    grads = torch.func.vmap(torch.func.grad(one_loss), in_dims=(None, 0, 0))(params, x, y)
    direct = (grads["fc.weight"].flatten(1).pow(2).sum(1) + grads["fc.bias"].pow(2).sum(1)).sqrt()
    r = train(net, loss_fn, ld.train, epochs=1, **SGD)
    h = r.history[0]
    assert h["grad_norm_mean"] == pytest.approx(direct.double().mean().item(), rel=1e-5)
    expected_q = torch.quantile(direct.double(), torch.tensor([0.05, 0.5, 0.95], dtype=torch.float64))
    assert [h["grad_norm_quantiles"][k] for k in ("5", "50", "95")] == pytest.approx(expected_q.tolist(), rel=1e-5)
    edges = torch.tensor(GRAD_NORM_EDGES, dtype=torch.float64)
    idx = (torch.bucketize(direct.double(), edges, right=True) - 1).clamp(0, len(edges) - 2)
    assert h["grad_norm_hist"] == torch.bincount(idx, minlength=len(edges) - 1).tolist()


def test_prediction_stats_against_slow_formula():
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 3.0, 0.0], [1.0, 1.0, 4.0], [0.5, 0.0, 0.0]])
    labels = torch.tensor([0, 2, 2, 1])
    s = prediction_stats(logits, labels, n_bins=15)
    nll, ent, correct = [], [], []
    for z, y in zip(logits.tolist(), labels.tolist()):
        lse = math.log(sum(math.exp(v) for v in z))
        p = [math.exp(v - lse) for v in z]
        nll.append(lse - z[y])
        ent.append(-sum(q * math.log(q) for q in p))
        correct.append(max(range(3), key=lambda k: z[k]) == y)
    c = np.array(correct)
    assert s["nll"] == pytest.approx(np.mean(nll)) and s["entropy"] == pytest.approx(np.mean(ent))
    assert s["nll_correct"] == pytest.approx(np.mean(np.array(nll)[c]))
    assert s["nll_incorrect"] == pytest.approx(np.mean(np.array(nll)[~c]))
    assert s["entropy_incorrect"] == pytest.approx(np.mean(np.array(ent)[~c]))
    assert s["accuracy"] == 0.5 and s["n"] == 4
    assert s["ece"] == pytest.approx(ece(logits=logits, labels=labels))
    # float32 and float64 agree; saturated logits stay finite; empty groups are None
    s64 = prediction_stats(logits.double(), labels)
    assert all(s[k] == pytest.approx(s64[k], rel=1e-6) for k in s)
    big = torch.tensor([[1e4, -1e4, 0.0], [0.0, 1e4, -1e4]])
    sb = prediction_stats(big, torch.tensor([0, 1]))
    assert sb["nll"] == 0.0 and sb["entropy"] == 0.0 and sb["nll_incorrect"] is None
    sw = prediction_stats(big, torch.tensor([1, 0]))
    assert sw["nll"] == pytest.approx((2e4 + 1e4) / 2) and sw["nll_correct"] is None
    with pytest.raises(ValueError, match="logits"):
        prediction_stats(torch.tensor([[float("nan"), 0.0]]), torch.tensor([0]))
    with pytest.raises(ValueError, match="labels"):
        prediction_stats(logits, torch.tensor([0, 1, 2]))


# ----------------------------------------------------------------------------------- schedules ---

def test_paper_schedule_learning_rates():
    assert PAPER_SCHEDULE["momentum"] == 0.9 and PAPER_SCHEDULE["weight_decay"] == 5e-4
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=PAPER_SCHEDULE["lr"])
    sched = T._make_scheduler(opt, "step", 350, PAPER_SCHEDULE["milestones"], PAPER_SCHEDULE["gamma_lr"])
    lrs = []
    for _ in range(PAPER_SCHEDULE["epochs"]):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs[0] == lrs[149] == 0.1
    assert lrs[150] == pytest.approx(0.01) and lrs[249] == pytest.approx(0.01)
    assert lrs[250] == pytest.approx(0.001) and lrs[349] == pytest.approx(0.001)
    assert SCHEDULES["paper_tiny_imagenet"]["milestones"] == (40, 60)


def test_cosine_profile_runs_with_adam():
    ld = _loaders()
    r = train(make_model("mlp", 3, 2, seed=0), nn.CrossEntropyLoss(), ld.train, val_loader=ld.val,
              progress=False, **{**SCHEDULES["cpu_adam"], "epochs": 2, "lr": 1e-2})
    assert r.history[1]["lr"] == pytest.approx(0.5e-2)
    assert r.history[-1]["val_accuracy"] > 0.5  # separable enough to learn in 12 steps


# --------------------------------------------------------------------------------- bad inputs ---

@pytest.mark.parametrize("kw,match", [
    ({"epochs": 0}, "epochs"),
    ({"optimizer": "rmsprop"}, "optimizer"),
    ({"lr": -1.0}, "lr"),
    ({"lr_schedule": "poly"}, "lr_schedule"),
    ({"momentum": 1.5}, "momentum"),
    ({"checkpoint_every": 0}, "checkpoint_every"),
    ({"config": {"x": float("nan")}}, "config"),
])
def test_bad_arguments(kw, match):
    ld = _loaders()
    args = {"epochs": 1, "progress": False, **kw}
    with pytest.raises(ValueError, match=match):
        train(DropoutNet(), nn.CrossEntropyLoss(), ld.train, **args)


@pytest.mark.parametrize("kw", [{"epochs": 0}, {"optimizer": "rmsprop"}, {"lr": 0.0}, {"gamma_lr": -1.0},
                                {"weight_decay": float("nan")}, {"n_bins": 0}, {"amp": "yes"},
                                {"channels_last": "maybe"}])
def test_settings_name_the_bad_field(kw):
    with pytest.raises(ValueError, match=f"^{next(iter(kw))}"):
        TrainSettings(**{"epochs": 1, **kw})


def test_clip_grad_norm_bounds_the_step():
    ld = make_loaders("gaussian_mixture", 192, seed=0, **DATA)  # a single step
    net = make_model("mlp", 3, 2, seed=0)
    before = torch.cat([p.detach().flatten().clone() for p in net.parameters()])

    def huge(logits, target):
        return 1e3 * nn.functional.cross_entropy(logits, target)

    train(net, huge, ld.train, epochs=1, optimizer="sgd", lr=1.0, momentum=0.0, weight_decay=0.0,
          clip_grad_norm=1e-3, progress=False)
    after = torch.cat([p.detach().flatten() for p in net.parameters()])
    assert (after - before).norm().item() == pytest.approx(1e-3, rel=1e-4)
    with pytest.raises(ValueError, match="clip_grad_norm"):
        train(net, huge, ld.train, epochs=1, clip_grad_norm=0.0, progress=False)


def test_diverging_loss_raises():
    ld = _loaders()

    def nan_loss(logits, target):
        return logits.sum() * float("nan")

    with pytest.raises(FloatingPointError, match="not finite|nan"):
        train(DropoutNet(), nan_loss, ld.train, epochs=1, progress=False)


def test_progress_bar_writes(capsys):
    ld = _loaders()
    train(DropoutNet(), nn.CrossEntropyLoss(), ld.train, val_loader=ld.val, epochs=1, progress=True)
    err = capsys.readouterr()
    assert "epoch 1/1" in err.out + err.err and "acc" in err.out + err.err


# ------------------------------------------------------------------------ logits at chosen epochs ---

def _train_eval_loader(ld):
    # unshuffled, with a generator of its own: a DataLoader without one draws its workers' base seed
    # from torch's global RNG on every pass, so skipping a pass would change the dropout of later steps
    return torch.utils.data.DataLoader(ld.train.dataset, batch_size=64, shuffle=False,
                                       generator=torch.Generator())


def test_logits_saved_at_the_chosen_epochs_only(tmp_path):
    ld = _loaders()
    res = train(DropoutNet(), nn.CrossEntropyLoss(), ld.train, val_loader=ld.val, test_loader=ld.test,
                train_eval_loader=_train_eval_loader(ld), epochs=4, seed=2, logits_epochs=(3, 1),
                out_dir=tmp_path / "run", **SGD)
    assert sorted(p.name for p in (tmp_path / "run").glob("logits_epoch_*.pt")) == [
        "logits_epoch_1.pt", "logits_epoch_3.pt"]
    assert res.settings["logits_epochs"] == [1, 3]
    for n in (1, 3):
        # the same run stopped after epoch n (milestones=[1] does not depend on the total epochs)
        ld = _loaders()
        short = train(DropoutNet(), nn.CrossEntropyLoss(), ld.train, val_loader=ld.val,
                      test_loader=ld.test, train_eval_loader=_train_eval_loader(ld), epochs=n, seed=2,
                      **SGD)
        saved = fio.torch_load(tmp_path / "run" / f"logits_epoch_{n}.pt")
        assert set(saved) == {f"{s}_{k}" for s in ("train", "val", "test") for k in ("logits", "labels")}
        assert torch.equal(saved["val_logits"], short.val_logits)
        assert torch.equal(saved["test_logits"], short.test_logits)
        assert torch.equal(saved["test_labels"], short.test_labels)
        with torch.no_grad():
            train_z = torch.cat([short.model.eval()(x) for x, _ in _train_eval_loader(ld)])
        torch.testing.assert_close(saved["train_logits"], train_z)
    # epoch 3 is not the final model: its logits differ from logits.pt
    final = fio.torch_load(tmp_path / "run" / "logits.pt")
    assert set(final) == {"val_logits", "val_labels", "test_logits", "test_labels"}
    assert not torch.equal(final["test_logits"], saved["test_logits"])


def test_logits_epochs_survive_a_resume(tmp_path):
    kw = dict(epochs=3, seed=1, logits_epochs=(1, 2, 3), **SGD)
    ld = _loaders()
    train(DropoutNet(), nn.CrossEntropyLoss(), ld.train, val_loader=ld.val, test_loader=ld.test,
          out_dir=tmp_path / "full", **kw)
    ld = _loaders()
    with pytest.raises(KeyboardInterrupt):  # 6 batches per epoch: dies in the second epoch
        train(DropoutNet(), KilledLoss(9), ld.train, val_loader=ld.val, test_loader=ld.test,
              out_dir=tmp_path / "cut", **kw)
    assert [p.name for p in (tmp_path / "cut").glob("logits_epoch_*.pt")] == ["logits_epoch_1.pt"]
    ld = _loaders(seed=99)
    resumed = train(DropoutNet(seed=5), nn.CrossEntropyLoss(), ld.train, val_loader=ld.val,
                    test_loader=ld.test, out_dir=tmp_path / "cut", **kw)
    assert resumed.resumed_from == 1
    for n in (1, 2, 3):
        a = fio.torch_load(tmp_path / "full" / f"logits_epoch_{n}.pt")
        b = fio.torch_load(tmp_path / "cut" / f"logits_epoch_{n}.pt")
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_no_logits_epochs_saves_no_epoch_logits_and_records_every_setting(tmp_path):
    ld = _loaders()
    res = train(DropoutNet(), nn.CrossEntropyLoss(), ld.train, val_loader=ld.val, test_loader=ld.test,
                epochs=2, out_dir=tmp_path, **SGD)
    assert not list(tmp_path.glob("logits_epoch_*")) and runfolder.saved_epochs(tmp_path) == []
    # every setting is recorded, set or not (no key appears only when set)
    for recorded in (res.settings, runfolder.read_config(tmp_path)["trainer"],
                     fio.torch_load(tmp_path / "checkpoint.pt")["settings"]):
        assert (recorded["logits_epochs"], recorded["record_subset"], recorded["compile"]) == ([], 0, False)


# ------------------------------------------------------------------- records on a subset ---

def test_evaluate_limit_is_the_prefix_of_the_full_pass():
    ld = _loaders()
    net = DropoutNet()
    z, y, _ = T.evaluate(net, ld.val, device="cpu")
    for limit in (1, 10, 32, 33, 10_000):  # inside a batch, at a batch edge, past the end
        zl, yl, _ = T.evaluate(net, ld.val, device="cpu", limit=limit)
        assert torch.equal(yl, y[:limit])
        # a cut batch is a smaller matrix product: equal up to float32 rounding
        torch.testing.assert_close(zl, z[:limit], rtol=1e-6, atol=1e-6)


def test_record_subset_records_a_prefix_and_keeps_the_training_and_the_saved_logits(tmp_path):
    ld = _loaders()
    full = train(DropoutNet(), nn.CrossEntropyLoss(), ld.train, val_loader=ld.val, test_loader=ld.test,
                 epochs=3, seed=2, out_dir=tmp_path / "full", **SGD)
    ld = _loaders()
    cut = train(DropoutNet(), nn.CrossEntropyLoss(), ld.train, val_loader=ld.val, test_loader=ld.test,
                train_eval_loader=_train_eval_loader(ld), epochs=3, seed=2, logits_epochs=(2,),
                record_subset=10, out_dir=tmp_path / "cut", **SGD)
    n_val, n_test = len(ld.val.dataset), len(ld.test.dataset)
    # epoch 1 on the first 10 samples; epoch 2 (saved logits) and 3 (the last) on all of them
    assert [(r["val_n"], r["test_n"]) for r in cut.history] == [(10, 10), (n_val, n_test), (n_val, n_test)]
    # the train-split pass only where its logits are saved
    assert ["train_eval_n" in r for r in cut.history] == [False, True, False]
    # evaluation draws no random number: the same training, the same final logits
    assert torch.equal(cut.test_logits, full.test_logits) and torch.equal(cut.val_logits, full.val_logits)
    assert _strip_time(cut.history)[2]["test_nll"] == _strip_time(full.history)[2]["test_nll"]
    assert cut.settings["record_subset"] == 10 and full.settings["record_subset"] == 0
    saved = fio.torch_load(tmp_path / "cut" / "logits_epoch_2.pt")
    assert saved["val_logits"].shape[0] == n_val and saved["train_logits"].shape[0] == len(ld.train.dataset)


@pytest.mark.parametrize("value", [-1, 1.5, "10"])
def test_bad_record_subset(value):
    with pytest.raises(ValueError, match="^record_subset"):
        TrainSettings(epochs=2, record_subset=value)


@pytest.mark.parametrize("value", [(0,), (5,), 3, "12", (1.5,)])
def test_bad_logits_epochs(value):
    with pytest.raises(ValueError, match="^logits_epochs"):
        TrainSettings(epochs=4, logits_epochs=value)


# ---------------------------------------------------------------------- no host reads per step ---

_HOST_READS = ("item", "tolist", "__float__", "__int__", "__bool__", "__index__", "cpu", "numpy")


def _host_reads_of_a_fit(monkeypatch, n_batches, **settings):
    """How many times a one-epoch fit reads a tensor back to the host (the methods a read goes
    through, counted by wrappers), with ``n_batches`` training batches."""
    count = [0]
    for name in _HOST_READS:
        method = getattr(torch.Tensor, name)

        def counted(self, *args, _method=method, **kwargs):
            count[0] += 1
            return _method(self, *args, **kwargs)
        monkeypatch.setattr(torch.Tensor, name, counted)
    ld = make_loaders("gaussian_mixture", 16, seed=0, n=16 * n_batches, n_classes=3, dim=2)
    net = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 3))
    # F.cross_entropy and SGD read nothing back (focalcal's losses check their input, which reads
    # the labels' range and the loss; Adam reads its CPU step counter)
    train(net, lambda z, y: nn.functional.cross_entropy(z, y), ld.train, val_loader=ld.val, epochs=1,
          optimizer="sgd", lr=0.1, **settings)
    monkeypatch.undo()
    return count[0]


@pytest.mark.parametrize("settings", [dict(progress=False), dict(progress=False, grad_norms=False),
                                      dict(progress=True, clip_grad_norm=1.0)])
def test_the_step_loop_reads_nothing_back_per_step(monkeypatch, settings):
    # the per-epoch records read the epoch's tensors once; twice the steps must not add a read.
    # progress=True on a "terminal" shows the bar, which used to read the running loss
    monkeypatch.setattr(T.sys.stderr, "isatty", lambda: True, raising=False)
    reads = [_host_reads_of_a_fit(monkeypatch, n, **settings) for n in (4, 8)]
    assert reads[0] > 0 and reads[0] == reads[1]


# ------------------------------------------------------------- device-resident data, eval batches ---

def test_device_loaders_train_and_resume_as_an_uninterrupted_run(tmp_path):
    # the device path on the CPU: a run cut in its second epoch and resumed equals an uninterrupted
    # one (the loader's generator, which draws the order, is checkpointed)
    def loaders(seed):
        return make_loaders("gaussian_mixture", 32, seed=seed, device="cpu", **DATA)
    ld = loaders(0)
    full = train(DropoutNet(), nn.CrossEntropyLoss(), ld.train, val_loader=ld.val, test_loader=ld.test,
                 epochs=2, seed=1, out_dir=tmp_path / "full", **SGD)
    with pytest.raises(KeyboardInterrupt):
        train(DropoutNet(), KilledLoss(9), ld.train, val_loader=ld.val, test_loader=ld.test,
              epochs=2, seed=1, out_dir=tmp_path / "cut", **SGD)
    ld = loaders(99)
    resumed = train(DropoutNet(seed=5), nn.CrossEntropyLoss(), ld.train, val_loader=ld.val,
                    test_loader=ld.test, epochs=2, seed=123, out_dir=tmp_path / "cut", **SGD)
    assert resumed.resumed_from == 1
    assert torch.equal(full.test_logits, resumed.test_logits)
    assert _strip_time(full.history) == _strip_time(resumed.history)
    assert full.history[-1]["train_n"] == DATA["n"]  # every training sample, once per epoch


def test_eval_batch_size_changes_no_recorded_number(tmp_path):
    # the evaluation passes in batches of 16 or of 1000 (all at once): the same records and logits.
    # float32 logits can differ in their last bits between batch sizes (another blocking of the
    # matrix products); the records are float64 statistics of them, equal to 1e-6 relative
    runs = []
    for ebs in (16, 1000):
        ld = make_loaders("fashion_mnist", 32, seed=0, eval_batch_size=ebs,
                          subset={"train": 128, "val": 300, "test": 300})
        runs.append(train(make_model("cnn", 10, 1, seed=0), nn.CrossEntropyLoss(), ld.train,
                          val_loader=ld.val, test_loader=ld.test, epochs=2, optimizer="adam", lr=1e-3,
                          progress=False))
    a, b = (_strip_time(r.history) for r in runs)
    assert torch.allclose(runs[0].test_logits, runs[1].test_logits, rtol=1e-5, atol=1e-6)
    for ra, rb in zip(a, b):
        assert ra.keys() == rb.keys()
        for k in ra:
            if isinstance(ra[k], float):
                assert ra[k] == pytest.approx(rb[k], rel=1e-6, abs=1e-9), k
            else:
                assert ra[k] == rb[k], k


def test_selective_released_histogram_is_cleared_by_the_trainer_hook():
    # the released selective-risk loss accumulates its histogram over an epoch; the trainer's
    # epoch hook clears it (a lab test: tests/test_losses.py runs on the library alone)
    import focalcal.losses as L
    from focalcal.lab.train import LossHooks

    g = torch.Generator().manual_seed(241)
    x1, t1 = torch.randn(20, 5, generator=g), torch.randint(0, 5, (20,), generator=g)
    x2, t2 = 0.3 * torch.randn(20, 5, generator=g), torch.randint(0, 5, (20,), generator=g)
    m = L.make_loss("selective_risk", variant="released", coverage=0.5)
    hooks = LossHooks.of(m)
    assert hooks.on_epoch_start is not None
    hooks.on_epoch_start(0)
    m(x1, t1)
    hooks.on_epoch_start(1)
    assert float(m(x2, t2)) == float(L.selective_risk_loss(x2, t2, variant="released", coverage=0.5))
    assert not m.state_dict()  # nothing to checkpoint


def test_cpu_trains_a_cnn_channels_last_and_an_mlp_contiguous():
    # "auto" on the CPU: a model with a 2-D convolution trains and evaluates channels-last (faster
    # there); the logits equal the contiguous layout's up to float32 rounding over a short run
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(96, 1, 28, 28, generator=g), torch.randint(0, 10, (96,), generator=g)
    data = torch.utils.data.TensorDataset(x, y)

    def run(layout):
        loader = torch.utils.data.DataLoader(data, batch_size=32, shuffle=True,
                                             generator=torch.Generator().manual_seed(1))
        settings = TrainSettings(epochs=2, optimizer="sgd", lr=0.05, lr_schedule="constant",
                                 device="cpu", channels_last=layout, seed=0)
        trainer = Trainer(make_model("cnn", 10, 1, seed=0), nn.CrossEntropyLoss(), settings, progress=False)
        result = trainer.fit(loader, val_loader=torch.utils.data.DataLoader(data, batch_size=64))
        return trainer, result

    auto, res_auto = run("auto")
    plain, res_plain = run(False)
    assert auto.channels_last and not plain.channels_last
    conv = [m for m in auto.model.modules() if isinstance(m, nn.Conv2d)][-1].weight  # in_channels > 1
    assert conv.is_contiguous(memory_format=torch.channels_last) and not conv.is_contiguous()
    assert torch.allclose(res_auto.val_logits, res_plain.val_logits, atol=1e-4)
    assert np.allclose([r["train_loss"] for r in res_auto.history],
                       [r["train_loss"] for r in res_plain.history], rtol=1e-5)
    mlp = Trainer(make_model("mlp", 3, 2, seed=0), nn.CrossEntropyLoss(), TrainSettings(epochs=1, device="cpu"))
    assert not mlp.channels_last  # no convolution: nothing to gain

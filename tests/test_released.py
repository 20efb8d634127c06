"""The released networks: registry and loader, the papers' protocols, the paired bootstrap, the
printed numbers, and the three "Released models" pages executed on the real logits.

No test downloads: the loader's download path is exercised with a fake ``urlopen``; real data comes
from the local copy (``shared_data_root``, a directory holding both published-logits folders).
"""

from __future__ import annotations

import hashlib
import io
import math
import re
import shutil
import time
import urllib.error
from pathlib import Path

import jupytext
import numpy as np
import pandas as pd
import pytest
import torch
from myst_nb.core.variables import format_plain_text
from nbclient import NotebookClient

from focalcal import metrics, plotting
from focalcal.lab import data as D
from focalcal.lab.data import published
from focalcal.lab.results import bootstrap as B
from focalcal.lab.results import released as R
from focalcal.posthoc import KK_TEMPERATURES, MUKHOTI_TEMPERATURES, TemperatureScaling
from focalcal_book import printed
from focalcal_book import released as rb
from focalcal_book import verdicts as vd

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["released_mukhoti", "released_focal_ts", "released_zhou"]


def synthetic(n: int = 2000, k: int = 10, scale: float = 3.0, temp: float = 1.6, seed: int = 0):
    """Logits and labels drawn from softmax(logits / temp): over-confident by a factor temp."""
    g = torch.Generator().manual_seed(seed)
    z = scale * torch.randn(n, k, generator=g, dtype=torch.float64)
    y = torch.multinomial(torch.softmax(z / temp, dim=1), 1, generator=g).squeeze(1)
    return z, y


@pytest.fixture
def no_network(monkeypatch):
    """Any download attempt fails (and is recorded) instead of reaching the network."""
    calls = []

    def urlopen(url, timeout=None):
        calls.append(url)
        raise urllib.error.URLError("network disabled in tests")

    monkeypatch.setattr(published.urllib.request, "urlopen", urlopen)
    return calls


@pytest.fixture
def empty_env(monkeypatch, tmp_path, no_network):
    """No local copy anywhere: empty cache, no FOCALCAL_LOGITS_ROOT."""
    monkeypatch.delenv(D.LOGITS_ROOT_ENV, raising=False)
    monkeypatch.setenv(D.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path


# --------------------------------------------------------------------------------------------
# registry and loader
# --------------------------------------------------------------------------------------------

def test_registry_lists_the_17_networks():
    nets = list(D.RELEASED.values())
    assert len(nets) == 17
    assert sum(n.source == "mukhoti2020" for n in nets) == 12
    assert {n.loss for n in nets} == {"Brier", "FLSD-53", "cross-entropy", "dual focal", "KDE-XE", "AURC"}
    for net in nets:
        assert net.splits in (("val", "test"), ("train", "test"), ("test",))
        assert net.n_classes == (100 if net.dataset == "cifar100" else 10)
        plotting.color(net.loss)  # every training loss has its book colour
        for files in net.files.values():
            for f in files:
                assert re.fullmatch(r"[0-9a-f]{64}", f.sha256)
                assert f.url.startswith("https://raw.githubusercontent.com/") and re.search(r"/[0-9a-f]{40}/", f.url)
                assert f.relpath.split("/")[0] in (D.MUKHOTI_FOLDER, D.ZHOU_FOLDER)
    # Mukhoti et al.'s tables order: Brier CIFAR-10, Brier CIFAR-100, FLSD-53 CIFAR-10
    assert list(D.RELEASED)[:12] == list(printed.MUKHOTI)
    with pytest.raises(ValueError, match="name must be one of"):
        D.released_network("cifar10_vgg_brier")


def test_registry_matches_the_readme_of_the_shared_copy(shared_data_root):
    readme = (shared_data_root / D.MUKHOTI_FOLDER / "README.md").read_text()
    listed = set(re.findall(r"^([0-9a-f]{64})  (\S+)$", readme, flags=re.M))
    ours = {(f.sha256, f.relpath.split("/", 1)[1]) for n in D.RELEASED.values() if n.source == "mukhoti2020"
            for fs in n.files.values() for f in fs}
    assert len(ours) == 48 and ours == listed


def _copy_network(src_root: Path, dst_root: Path, name: str) -> None:
    for files in D.RELEASED[name].files.values():
        for f in files:
            (dst_root / f.relpath).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src_root / f.relpath, dst_root / f.relpath)


@pytest.mark.parametrize("name", ["cifar100_resnet50_brier", "cifar10_resnet50_aurc_zhou"])
def test_loads_from_a_local_directory(shared_data_root, tmp_path, monkeypatch, empty_env, name):
    _copy_network(shared_data_root, tmp_path / "data", name)
    net = D.RELEASED[name]
    z, y = D.released_logits(name, "test", root=tmp_path / "data", download=False)
    assert z.shape == (10000, net.n_classes) and z.dtype == torch.float64 and y.dtype == torch.int64
    monkeypatch.setenv(D.LOGITS_ROOT_ENV, str(tmp_path / "data"))  # the same through the variable
    z2, y2 = D.released_logits(name, "test", download=False)
    assert torch.equal(z, z2) and torch.equal(y, y2)
    assert not list((empty_env / "cache").rglob("*.np*"))  # read in place, nothing copied or downloaded


def test_a_corrupt_local_copy_is_refused(shared_data_root, tmp_path, empty_env):
    name = "cifar10_resnet50_brier"
    _copy_network(shared_data_root, tmp_path / "data", name)
    f = D.RELEASED[name].files["val"][0]
    blob = bytearray((tmp_path / "data" / f.relpath).read_bytes())
    blob[-1] ^= 1
    (tmp_path / "data" / f.relpath).write_bytes(bytes(blob))
    with pytest.raises(D.DataUnavailableError, match="sha256"):
        D.released_logits(name, "val", root=tmp_path / "data", download=False)


def test_without_data_the_error_names_the_variable(empty_env, no_network):
    with pytest.raises(D.DataUnavailableError, match="FOCALCAL_LOGITS_ROOT"):
        D.released_logits("cifar10_resnet50_brier", "test", download=False)
    assert no_network == []
    with pytest.raises(D.DataUnavailableError, match="could not download .*FOCALCAL_LOGITS_ROOT"):
        D.released_logits("cifar10_resnet50_brier", "test")
    assert len(no_network) == 1 and no_network[0] == D.RELEASED["cifar10_resnet50_brier"].files["test"][0].url
    with pytest.raises(D.DataUnavailableError, match="does not exist"):
        D.released_logits("cifar10_resnet50_brier", "test", root=empty_env / "nowhere")
    with pytest.raises(ValueError, match="split must be one of"):
        D.released_logits("cifar10_resnet50_brier", "train")


def test_download_is_checked_against_the_sha256(shared_data_root, empty_env, monkeypatch):
    f = D.RELEASED["cifar10_resnet50_flsd53"].files["test"][1]  # the labels, 80 kB
    good = (shared_data_root / f.relpath).read_bytes()
    served = {"bytes": good[:-1] + bytes([good[-1] ^ 1])}

    class Response(io.BytesIO):
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(published.urllib.request, "urlopen", lambda url, timeout=None: Response(served["bytes"]))
    with pytest.raises(D.DataUnavailableError, match="checksum mismatch"):
        D.released_path(f)
    cached = empty_env / "cache" / f.relpath
    assert not cached.exists()  # nothing half-checked is left in the cache
    served["bytes"] = good
    assert D.released_path(f) == cached and hashlib.sha256(cached.read_bytes()).hexdigest() == f.sha256


def test_published_logits_reads_the_root_variable(shared_data_root, monkeypatch):
    monkeypatch.setenv(D.LOGITS_ROOT_ENV, str(shared_data_root))
    assert D.published_logits_path("ce", "test", download=False) == shared_data_root / D.ZHOU_FOLDER / "ce_test.npz"
    z, y = D.published_logits("focal", "test", download=False)
    z2, y2 = D.released_logits("cifar10_resnet50_flsd53_zhou", "test", download=False)
    assert torch.equal(z, z2) and torch.equal(y, y2)


def test_fit_eval_split(shared_data_root):
    s = R.fit_eval_split("cifar10_resnet50_ce_zhou", root=shared_data_root)
    assert s.protocol == "test halves" and s.fit_labels.shape == s.eval_labels.shape == (5000,)
    z, y = D.released_logits("cifar10_resnet50_ce_zhou", "test", root=shared_data_root)
    perm = torch.randperm(10000, generator=torch.Generator().manual_seed(R.HALF_SPLIT_SEED))
    assert torch.equal(s.fit_logits, z[perm[:5000]]) and torch.equal(s.eval_logits, z[perm[5000:]])
    m = R.fit_eval_split("cifar10_wide_resnet_flsd53", root=shared_data_root)
    assert m.protocol == "validation / test" and m.fit_labels.shape == (5000,) and m.eval_labels.shape == (10000,)


# --------------------------------------------------------------------------------------------
# Mukhoti et al.'s protocol and their released code's conventions
# --------------------------------------------------------------------------------------------

def code_ece_loop(logits, labels, adaptive=False, n_bins=15):
    """Mukhoti et al.'s ECELoss / AdaptiveECELoss as written in their repository (a loop over bins)."""
    conf, pred = torch.softmax(torch.as_tensor(logits).float(), dim=1).max(dim=1)
    acc = pred.eq(torch.as_tensor(labels))
    if adaptive:
        x = conf.numpy()
        edges = np.interp(np.linspace(0, len(x), n_bins + 1), np.arange(len(x)), np.sort(x))
        _, edges = np.histogram(x, edges)
    else:
        edges = torch.linspace(0, 1, n_bins + 1)
    ece = torch.zeros(1)
    for lo, hi in zip(edges[:-1], edges[1:]):
        in_bin = conf.gt(lo.item()) * conf.le(hi.item())
        prop = in_bin.float().mean()
        if prop.item() > 0:
            ece += torch.abs(conf[in_bin].mean() - acc[in_bin].float().mean()) * prop
    return float(ece)


@pytest.mark.parametrize("adaptive", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_code_ece_is_the_released_code(adaptive, seed):
    z, y = synthetic(n=3000, seed=seed)
    assert R.code_ece(z, y, adaptive=adaptive) == pytest.approx(code_ece_loop(z, y, adaptive), abs=2e-6)


def test_code_ece_equal_width_is_the_library_ece_up_to_float32():
    z, y = synthetic(n=5000, seed=3)
    assert R.code_ece(z, y) == pytest.approx(metrics.ece(logits=z, labels=y), abs=1e-6)


def test_code_temperature_is_the_released_search():
    z, y = synthetic(n=3000, temp=1.6, seed=4)
    best, t_opt, t = 1e7, 1.0, 0.1
    for _ in range(100):  # their loop, with the loop ECE as the oracle
        e = code_ece_loop(z.float() / t, y)
        if best > e:
            t_opt, best = t, e
        t += 0.1
    assert R.code_temperature(z, y) == pytest.approx(t_opt, abs=1e-12)
    ts = TemperatureScaling("ece", grid=MUKHOTI_TEMPERATURES).fit(z, y)
    assert R.code_temperature(z, y) == pytest.approx(ts.temperature_, abs=1e-9)


def test_mukhoti_row_against_direct_computation():
    zv, yv = synthetic(n=2000, temp=1.6, seed=5)
    zt, yt = synthetic(n=3000, temp=1.6, seed=6)
    row = R.mukhoti_row(R.FitEval(zv, yv, zt, yt, "validation / test"))
    t = TemperatureScaling("ece", grid=MUKHOTI_TEMPERATURES).fit(zv, yv).temperature_
    assert row["temperature"] == t and 1.3 < t < 2.0  # the data are over-confident by 1.6
    assert row["error"] == pytest.approx(float((zt.argmax(1) != yt).double().mean()))
    assert row["ece_post"] == pytest.approx(metrics.ece(logits=zt / t, labels=yt))
    assert row["nll_pre"] == pytest.approx(float(torch.nn.functional.cross_entropy(zt, yt)))
    conf = torch.softmax(zt / t, 1).amax(1)
    assert row["s99_post"] == pytest.approx(float((conf > 0.99).double().mean()))
    assert row["mce_pre"] >= row["ece_pre"] and row["ece_post"] < row["ece_pre"]


# --------------------------------------------------------------------------------------------
# Komisarenko & Kull's protocol and Zhou et al.'s quantities
# --------------------------------------------------------------------------------------------

def test_kk_fit_and_rows():
    zv, yv = synthetic(n=400, k=4, temp=1.5, seed=7)
    zt, yt = synthetic(n=500, k=4, temp=1.5, seed=8)
    params = R.kk_fit(zv, yv, psi_gamma=3.0)
    assert list(params) == list(R.KK_METHODS)
    assert "Psi" not in R.kk_fit(zv, yv)
    ts = TemperatureScaling("ece_mass", grid=KK_TEMPERATURES).fit(zv, yv)
    assert params["TS (ECE)"]["temperature"] == ts.temperature_
    assert params["TS (ECE)"]["val_score"] == pytest.approx(metrics.ece(logits=zv / ts.temperature_, labels=yv, binning="mass"))
    rows = R.kk_rows(params, zt, yt)
    assert len({r["accuracy"] for r in rows}) == 1
    fts = next(r for r in rows if r["method"] == "focal TS (ECE)")
    lp = R.kk_log_probs(params, zt)["focal TS (ECE)"]
    assert fts["ece_mass"] == pytest.approx(metrics.ece(logits=lp, labels=yt, binning="mass"))


def test_zhou_row_against_the_metrics():
    zv, yv = synthetic(n=1500, seed=9)
    zt, yt = synthetic(n=2000, seed=10)
    row = R.zhou_row(zt, yt, zv, yv)
    t = row["temperature"]
    assert row["cwece_ts"] == pytest.approx(metrics.classwise_ece(logits=zt / t, labels=yt))
    assert row["adaece_raw"] == pytest.approx(metrics.ece(logits=zt, labels=yt, binning="mass"))
    for s in ("msp", "neg_entropy", "margin"):
        assert row[f"aurc_{s}"] == pytest.approx(metrics.aurc(logits=zt, labels=yt, score=s))
        assert row[f"eaurc_{s}"] == pytest.approx(metrics.eaurc(logits=zt, labels=yt, score=s))


def test_cache_recomputes_only_when_the_key_changes(tmp_path):
    calls = []

    def compute():
        calls.append(1)
        return {"a": 1.5, "b": float("nan"), "rows": [{"x": 2.0}]}

    name = "cifar10_resnet50_brier"
    first = R.cached("t", name, compute, cache=tmp_path)
    again = R.cached("t", name, compute, cache=tmp_path)
    assert len(calls) == 1 and again["a"] == 1.5 and math.isnan(again["b"]) and again["rows"] == [{"x": 2.0}]
    R.cached("t", name, compute, cache=tmp_path, params={"n": 2})
    R.cached("t", "cifar10_resnet110_brier", compute, cache=tmp_path)
    assert len(calls) == 3 and math.isnan(first["b"])
    R.cached("t", name, compute, cache=None)
    assert len(calls) == 4
    assert re.fullmatch(r"[0-9a-f]{16}", R.code_digest())


def test_the_code_key_ignores_documentation(tmp_path):
    from focalcal.lab.io import source_digest

    def digest(text: str) -> str:
        folder = tmp_path / str(abs(hash(text)))
        folder.mkdir()
        (folder / "m.py").write_text(text)
        return source_digest([folder / "m.py"], folder)

    a = digest('"""Module."""\n\ndef f(x):\n    """Doc."""\n    return x + 1  # comment\n')
    b = digest('"""Other words."""\n\n\ndef f(x):\n    """Other doc."""\n\n    return x + 1\n')
    c = digest('"""Module."""\n\ndef f(x):\n    """Doc."""\n    return x + 2\n')
    assert a == b != c


# --------------------------------------------------------------------------------------------
# the paired bootstrap
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("binning", ["mass", "width"])
def test_resampled_ece_is_the_ece_of_the_resample(binning):
    g = torch.Generator().manual_seed(11)
    n = 997
    conf = torch.round(torch.rand(n, generator=g, dtype=torch.float64) * 40) / 40  # many ties
    conf[:3] = torch.tensor([0.0, 1.0, 0.5], dtype=torch.float64)
    hit = (torch.rand(n, generator=g, dtype=torch.float64) < conf).double()
    idx = torch.randint(n, (25, n), generator=g)
    got = B.resampled_ece(conf, hit, B.resample_counts(idx, n), binning=binning)
    want = metrics.calibration_error(conf[idx], hit[idx], binning=binning)
    assert torch.allclose(got, want, atol=1e-14, rtol=0)


def test_identical_calibrators_give_zero():
    z, y = synthetic(n=3000, seed=12)
    iv = B.ece_difference(z, z.clone(), y, n_resamples=1000)
    assert iv.estimate == iv.low == iv.high == 0.0 and iv.verdict == "indistinguishable"


def test_a_clearly_worse_calibrator_is_found_and_the_sign_flips():
    z, y = synthetic(n=4000, temp=1.6, seed=13)
    worse = B.ece_difference(z, z / 1.6, y, n_resamples=1000)  # raw (over-confident) against calibrated
    better = B.ece_difference(z / 1.6, z, y, n_resamples=1000)
    assert worse.verdict == "worse" and worse.low > 0 and better.verdict == "better" and better.high < 0
    assert better.estimate == pytest.approx(-worse.estimate)
    assert worse.estimate == pytest.approx(metrics.ece(logits=z, labels=y, binning="mass")
                                           - metrics.ece(logits=z / 1.6, labels=y, binning="mass"))
    again = B.ece_difference(z, z / 1.6, y, n_resamples=1000)
    assert (again.low, again.high) == (worse.low, worse.high)  # seeded


def test_several_candidates_share_the_resamples():
    z, y = synthetic(n=3000, temp=1.6, seed=15)
    both = B.ece_differences({"a": z / 1.3, "b": z / 1.8}, z, y, n_resamples=1000, seed=3)
    assert both["a"] == B.ece_difference(z / 1.3, z, y, n_resamples=1000, seed=3)
    assert both["b"] == B.ece_difference(z / 1.8, z, y, n_resamples=1000, seed=3)


def test_percentile_intervals_cover_a_mean_about_95_percent_of_the_time():
    g = torch.Generator().manual_seed(14)
    reps, n, covered = 200, 200, 0
    for _ in range(reps):
        x = 0.3 + torch.randn(n, generator=g, dtype=torch.float64)
        draws = B.paired_bootstrap(lambda idx: x[idx].mean(1), n, n_resamples=1000, seed=int(torch.randint(10**6, (1,), generator=g)))
        lo, hi = torch.quantile(draws, torch.tensor([0.025, 0.975], dtype=torch.float64))
        covered += bool(lo <= 0.3 <= hi)
    assert 0.89 <= covered / reps <= 0.99


def test_paired_bootstrap_checks_its_statistic():
    with pytest.raises(ValueError, match="statistic must return shape"):
        B.paired_bootstrap(lambda idx: idx.double().mean(), 10, n_resamples=5)
    assert [B.verdict(-2, -1), B.verdict(1, 2), B.verdict(-1, 1)] == ["better", "worse", "indistinguishable"]


# --------------------------------------------------------------------------------------------
# the printed numbers and their comparison
# --------------------------------------------------------------------------------------------

def test_printed_numbers_are_complete_and_sourced(shared_data_root):
    rows = printed.printed_rows(printed.MUKHOTI)
    assert len(rows) == 12 * 11 + 2 * 4 + 4 * 2  # Tables 1, 2, 4, 9-12; Table 13 (two networks); Table 8 (CIFAR-100)
    assert set(rows["network"]) <= set(D.RELEASED) and set(rows["source"]) <= set(printed.SOURCES)
    z = printed.printed_rows(printed.ZHOU)
    assert len(z) == 5 * 8 and set(z["network"]) == {n for n, net in D.RELEASED.items() if net.source == "zhou2025"}
    papers = shared_data_root.parent / "papers"  # the plain-text copies beside the data
    for src in printed.SOURCES.values():
        (path,) = papers.glob(f"{src.paper.rstrip('0123456789')}*.txt")
        line = path.read_text().splitlines()[src.line - 1]
        assert line.startswith(src.table.removeprefix("App. ") + ":"), (src, line[:80])


def test_compare_to_the_printed_rounding():
    assert rb.compare(1.0791, "1.08") == "exact" and rb.compare(1.0, "1") == "exact"
    assert rb.compare(2.0208, "2.03") == "close" and rb.compare(1.5097, "1.52") == "differs"
    assert rb.compare(60.33, "46.31") == "differs" and rb.compare(float("nan"), "1.0") == "differs"


# --------------------------------------------------------------------------------------------
# the pages, executed on the real logits
# --------------------------------------------------------------------------------------------

def _outputs(nb) -> tuple[str, int, dict[str, object]]:
    text, images, glued = [], 0, {}
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            data = o.get("data", {})
            name = o.get("metadata", {}).get("scrapbook", {}).get("name")
            if name is not None:
                glued[name] = data
                continue
            images += any(k.startswith("image/") for k in data)
            text += [str(v) for k, v in data.items() if k.startswith("text/")] + [o.get("text", "")]
    return " ".join(text), images, glued


@pytest.mark.notebooks
@pytest.mark.parametrize("page", PAGES)
def test_page_computes_its_numbers(shared_data_root, page):
    path = ROOT / "book" / "experiments" / f"{page}.md"
    nb = jupytext.read(path)
    start = time.perf_counter()
    NotebookClient(nb, timeout=1800, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    print(f"{page}: executed in {time.perf_counter() - start:.0f} s")
    text, images, glued = _outputs(nb)
    assert "not available" not in text, f"{page} shows the no-data note"
    source = path.read_text()
    wanted = set(re.findall(r"\{glue:(?:text|md)\}`([A-Za-z0-9_]+)", source))
    assert wanted and wanted <= set(glued), f"{page} does not glue {sorted(wanted - set(glued))}"
    for key, spec in re.findall(r"\{glue:text\}`([A-Za-z0-9_]+):([^`]+)`", source):
        plain = next(v for k, v in glued[key].items() if k.endswith("text/plain"))
        format_plain_text(plain, spec)  # what the build does: a numpy scalar's repr would fail here
    figures = len(re.findall(r"released\.(?:forest_plot|reliability_row|aurc_plot)\(", source))
    assert images >= figures >= 1, f"{page}: {images} images for {figures} figures"


def test_loss_verdicts_follow_the_books_one_rule():
    intervals = pd.DataFrame({"loss": ["Brier", "Brier", "FLSD-53", "CE", "CE", "AURC", "AURC"],
                              "verdict": ["better", "better", "better", "better", "worse",
                                          "better", "indistinguishable"]})
    v = rb.loss_verdicts(intervals).set_index("loss")["verdict"]
    assert v["Brier"] == vd.HOLDS                  # better on both networks
    assert v["FLSD-53"] == vd.NOT_RESOLVED         # one network never resolves a claim
    assert v["CE"] == vd.DOES_NOT_HOLD             # a network where focal TS is worse decides
    assert v["AURC"] == vd.NOT_RESOLVED


def test_compared_with_places_a_value_against_the_papers():
    assert [rb.compared_with(v, 20.0) for v in (45.8, 12.0, 20.0)] == ["above", "below", "equal to"]



def test_warm_runs_the_pages_own_calls_for_every_local_network(tmp_path, monkeypatch):
    # make calibrator-cache fills the cache through the same calls the three pages make (so the same
    # cache keys), one network and table per task; the protocols are replaced by stand-ins that
    # record their arguments in files (the tasks run in worker processes)
    (tmp_path / "_toc.yml").write_text("root: index\n")
    monkeypatch.chdir(tmp_path)
    names = ["cifar10_resnet110_flsd53", "cifar10_resnet50_ce_zhou", "cifar10_resnet50_brier"]
    monkeypatch.setattr(rb, "RELEASED", {n: D.RELEASED[n] for n in names})
    absent = {id(f) for fs in D.RELEASED[names[2]].files.values() for f in fs}  # as if not downloaded
    real_path = rb.released_path

    def released_path(f):
        if id(f) in absent:
            raise D.DataUnavailableError("not here")
        return real_path(f)

    monkeypatch.setattr(rb, "released_path", released_path)
    calls = tmp_path / "calls"
    calls.mkdir()

    def recorder(kind):
        def call(names, *, cache, **kw):
            (calls / f"{kind}-{names[0]}-{kw.get('paper_protocol', False)}").write_text(str(cache))
        return call

    monkeypatch.setattr(R, "kk_tables", recorder("kk"))
    monkeypatch.setattr(R, "mukhoti_table", recorder("mukhoti"))
    monkeypatch.setattr(R, "zhou_table", recorder("zhou"))
    done = rb.warm(jobs=2)
    assert done[:2] == ["kk cifar10_resnet110_flsd53", "kk cifar10_resnet50_ce_zhou"]  # the longest first
    assert sorted(done[2:]) == ["mukhoti cifar10_resnet110_flsd53", "zhou cifar10_resnet110_flsd53",
                                "zhou cifar10_resnet50_ce_zhou", "zhou-paper cifar10_resnet50_ce_zhou"]
    assert sorted(p.name for p in calls.iterdir()) == sorted([
        "kk-cifar10_resnet110_flsd53-False", "kk-cifar10_resnet50_ce_zhou-False", "mukhoti-cifar10_resnet110_flsd53-False",
        "zhou-cifar10_resnet110_flsd53-False", "zhou-cifar10_resnet50_ce_zhou-False", "zhou-cifar10_resnet50_ce_zhou-True"])
    assert {p.read_text() for p in calls.iterdir()} == {str(tmp_path / "_build" / "released-cache")}

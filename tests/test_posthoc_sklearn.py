"""The calibrators as scikit-learn estimators, without the library depending on scikit-learn.

With scikit-learn installed: ``check_is_fitted``, ``clone``, ``Pipeline`` / ``make_pipeline`` (a
calibrator as the last step), ``GridSearchCV`` over a calibrator's parameters with a proper scorer,
and ``pickle``; ``predict_proba`` returns the input's array type; the ``NotFittedError`` raised is a
subclass of scikit-learn's. Without it the error is still a ``ValueError`` and ``AttributeError``,
and importing ``focalcal.posthoc`` never imports scikit-learn. These tests run on the venv's
scikit-learn and on the oldest release the ``test`` extra admits (``tests/test_packaging.py``).
"""

from __future__ import annotations

import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.exceptions import NotFittedError as SklearnNotFittedError
from sklearn.model_selection import GridSearchCV, StratifiedKFold
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import FunctionTransformer
from sklearn.utils.validation import check_is_fitted

import focalcal.posthoc as posthoc
from focalcal.posthoc import FocalTemperatureScaling, PsiCorrection, TemperatureScaling

CALIBRATORS = {
    "ts_nll": lambda: TemperatureScaling(),
    "ts_ece": lambda: TemperatureScaling("ece"),
    "ts_focal": lambda: TemperatureScaling("focal", gamma=2.0),
    "fts_grid": lambda: FocalTemperatureScaling(temperatures=np.arange(1, 101) / 20),
    "fts_line": lambda: FocalTemperatureScaling(temperatures=np.arange(1, 101) / 20, search="line",
                                                criterion="ece_mass"),
}


def _data(n: int = 900, k: int = 4, sharpness: float = 3.0, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Logits ``sharpness`` times too confident, and labels drawn from the calibrated softmax."""
    rng = np.random.default_rng(seed)
    z = 2.0 * rng.standard_normal((n, k))
    y = (z + rng.gumbel(size=z.shape)).argmax(1)
    return sharpness * z, y


@pytest.mark.parametrize("name", CALIBRATORS)
def test_check_is_fitted_and_the_not_fitted_error_are_scikit_learns(name):
    cal = CALIBRATORS[name]()
    with pytest.raises(SklearnNotFittedError):
        check_is_fitted(cal)
    with pytest.raises(SklearnNotFittedError, match="not fitted yet"):
        cal.predict_proba(np.zeros((2, 4)))
    z, y = _data()
    check_is_fitted(cal.fit(z, y))  # passes silently once fitted
    np.testing.assert_array_equal(cal.classes_, np.arange(4))


def test_the_not_fitted_error_class():
    assert issubclass(posthoc.NotFittedError, SklearnNotFittedError)
    assert issubclass(posthoc.NotFittedError, ValueError) and issubclass(posthoc.NotFittedError, AttributeError)
    with pytest.raises(posthoc.NotFittedError) as info:
        TemperatureScaling().forward(torch.zeros(1, 3))
    assert type(info.value) is posthoc.NotFittedError
    # picklable like any exception: found again by its qualified name
    assert type(pickle.loads(pickle.dumps(info.value))) is posthoc.NotFittedError


def test_psi_correction_needs_no_fit():
    check_is_fitted(PsiCorrection(2.0))


def _in_fresh_python(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_importing_the_library_does_not_import_scikit_learn():
    out = _in_fresh_python("import sys, focalcal, focalcal.posthoc, focalcal.metrics; "
                           "print('sklearn' in sys.modules)")
    assert out == "False"


def test_without_scikit_learn_the_error_is_still_a_value_and_attribute_error():
    out = _in_fresh_python(
        "import sys; sys.modules['sklearn'] = None  # as if not installed\n"
        "import torch\n"
        "from focalcal.posthoc import NotFittedError, TemperatureScaling\n"
        "try:\n"
        "    TemperatureScaling().predict_proba(torch.zeros(1, 3))\n"
        "except NotFittedError as err:\n"
        "    print([c.__name__ for c in type(err).__mro__[1:3]], isinstance(err, ValueError))\n")
    assert out == "['ValueError', 'AttributeError'] True"


@pytest.mark.parametrize("name", CALIBRATORS)
def test_clone_gives_an_unfitted_copy_with_the_same_parameters(name):
    z, y = _data()
    cal = CALIBRATORS[name]().fit(z, y)
    copy = clone(cal)
    assert type(copy) is type(cal)
    assert copy.get_params().keys() == cal.get_params().keys()
    assert repr(copy.get_params()) == repr(cal.get_params())
    with pytest.raises(SklearnNotFittedError):
        check_is_fitted(copy)


@pytest.mark.parametrize("name", CALIBRATORS)
def test_pipeline_with_the_calibrator_as_last_step(name):
    z, y = _data()
    pipe = make_pipeline(CALIBRATORS[name]())
    with pytest.raises(SklearnNotFittedError):
        check_is_fitted(pipe)
    pipe.fit(z, y)
    check_is_fitted(pipe)
    p = pipe.predict_proba(z)
    assert isinstance(p, np.ndarray) and p.shape == z.shape
    direct = CALIBRATORS[name]().fit(z, y).predict_proba(z)
    np.testing.assert_allclose(p, direct, rtol=0, atol=0)


def test_pipeline_from_a_classifiers_probabilities():
    """A classifier's probabilities, turned into logits by ``np.log`` in a first step."""
    z, y = _data()
    probs = torch.softmax(torch.from_numpy(z), 1).numpy()
    pipe = Pipeline([("log", FunctionTransformer(np.log)), ("ts", TemperatureScaling())]).fit(probs, y)
    assert pipe.named_steps["ts"].temperature_ == pytest.approx(
        TemperatureScaling().fit(z, y).temperature_, rel=1e-9)
    np.testing.assert_allclose(pipe.predict_proba(probs).sum(1), 1.0, atol=1e-12)


def test_grid_search_over_a_calibrators_parameters_with_a_proper_scorer():
    """scoring='neg_log_loss' (a proper scoring rule) selects the right temperature grid: the
    logits are 3 times too sharp, so the one-point grid T = 3 beats T = 1 on every fold."""
    z, y = _data(sharpness=3.0)
    search = GridSearchCV(TemperatureScaling("ece"), {"grid": [(1.0,), (3.0,)], "criterion": ["nll", "ece"]},
                          scoring="neg_log_loss", cv=StratifiedKFold(3), error_score="raise").fit(z, y)
    assert search.best_params_["grid"] == (3.0,)
    assert search.best_estimator_.temperature_ == 3.0
    check_is_fitted(search.best_estimator_)
    # the CV score is the mean log loss of predict_proba on the held-out folds
    fold_losses = []
    for train, test in StratifiedKFold(3).split(z, y):
        cal = TemperatureScaling(search.best_params_["criterion"], grid=(3.0,)).fit(z[train], y[train])
        p = cal.predict_proba(z[test])
        fold_losses.append(-np.log(p[np.arange(len(test)), y[test]]).mean())
    assert search.best_score_ == pytest.approx(-np.mean(fold_losses), rel=1e-9)
    assert search.predict_proba(z).shape == z.shape


def test_grid_search_over_focal_ts_gammas():
    z, y = _data(n=600, k=3)
    search = GridSearchCV(FocalTemperatureScaling(temperatures=np.arange(1, 101) / 20),
                          {"gammas": [(0.0,), (-0.5, 0.0, 0.5, 1.0)], "criterion": ["nll", "ece_mass"]},
                          scoring="neg_log_loss", cv=3, error_score="raise").fit(z, y)
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()
    assert search.best_estimator_.gamma_ev_ in search.best_params_["gammas"]


@pytest.mark.parametrize("name", [*CALIBRATORS, "psi"])
def test_pickle_round_trip(name):
    z, y = _data()
    cal = PsiCorrection(2.0) if name == "psi" else CALIBRATORS[name]()
    assert repr(pickle.loads(pickle.dumps(cal)).get_params()) == repr(cal.get_params())  # unfitted
    cal.fit(z, y)
    back = pickle.loads(pickle.dumps(cal))
    np.testing.assert_array_equal(back.predict_proba(z), cal.predict_proba(z))
    check_is_fitted(back)
    if name.startswith("fts"):  # the lazily computed exact scores survive the trip
        torch.testing.assert_close(back.candidates_, cal.candidates_, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_predict_proba_numpy_in_numpy_out(dtype):
    z, y = _data()
    ts = TemperatureScaling().fit(z, y)
    p = ts.predict_proba(z[:5].astype(dtype))
    assert isinstance(p, np.ndarray) and p.dtype == dtype and p.shape == (5, 4)
    lst = ts.predict_proba(z[:5].tolist())  # any array-like other than a Tensor: NumPy
    assert isinstance(lst, np.ndarray) and lst.shape == (5, 4)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
def test_predict_proba_torch_in_torch_out(dtype):
    z, y = _data()
    fts = FocalTemperatureScaling(temperatures=np.arange(1, 101) / 20).fit(z, y)
    zt = torch.from_numpy(z[:5]).to(dtype).requires_grad_(True)
    p = fts.predict_proba(zt)
    assert isinstance(p, torch.Tensor) and p.dtype == dtype and p.requires_grad
    np.testing.assert_allclose(p.detach().double().numpy(),
                               fts.predict_proba(zt.detach().double().numpy()), rtol=0.02, atol=1e-3)

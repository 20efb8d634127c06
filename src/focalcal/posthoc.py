r"""Post-hoc calibrators on logits: temperature scaling, focal temperature scaling, Psi, and the
calibrators practitioners weigh them against: vector and matrix scaling, Dirichlet calibration,
ensemble temperature scaling, histogram binning and isotonic regression.

Every calibrator has a scikit-learn-like interface *and* is a :class:`torch.nn.Module`:

* ``fit(logits, labels) -> self`` on a held-out fitting set, ``logits`` of shape ``(N, K)``,
  ``labels`` of shape ``(N,)`` (integers in ``[0, K)``);
* ``predict_proba(logits) -> probs`` for logits of shape ``(..., K)`` (any leading dims), in the
  array type and dtype of ``logits``: a Tensor for a Tensor (on its device), a NumPy array for
  anything else (a NumPy array, a list), float32 stays float32, float64 stays float64;
* ``forward(logits) -> log-probabilities`` of shape ``(..., K)``, differentiable w.r.t. the logits,
  so a fitted calibrator can sit at the end of a network (``nn.Sequential(net, calibrator)``);
* ``get_params()`` / ``set_params(**params)`` as in scikit-learn: the constructor arguments are
  stored unchanged under their own names, so ``sklearn.base.clone`` makes an unfitted copy
  (scikit-learn itself is not needed);
* fitted attributes end in an underscore: ``temperature_`` on every temperature-based calibrator,
  ``gamma_ev_`` on :class:`FocalTemperatureScaling` (Komisarenko & Kull's evaluation gamma, the
  ``gamma_ev`` column of the results tables; not the training loss's ``gamma``), ``n_classes_``,
  ``best_score_`` and, for grid searches, the whole score grid ``scores_``. They are python
  floats / tensors and travel in ``state_dict()`` (as the module's extra state), so
  ``load_state_dict`` restores a fitted model; a calibrator also pickles, fitted or not.

scikit-learn
------------
The calibrators are scikit-learn estimators without depending on scikit-learn (``pip install
focalcal`` does not install it): with scikit-learn installed (1.3 or later),
``sklearn.base.clone``, ``sklearn.utils.validation.check_is_fitted``, ``Pipeline`` /
``make_pipeline`` (a calibrator as the last step), ``GridSearchCV`` over a calibrator's
parameters with a proper scorer (``scoring="neg_log_loss"``) and ``pickle`` work. They declare
themselves probabilistic classifiers of the class indices ``classes_ = [0, ..., K - 1]`` (tags
built from scikit-learn's own classes when it asks for them), and the
:class:`NotFittedError` they raise is a subclass of scikit-learn's when scikit-learn is
importable (it is imported on first use of the error, not with this module).

>>> import numpy as np
>>> from sklearn.model_selection import GridSearchCV
>>> from sklearn.pipeline import make_pipeline
>>> from sklearn.utils.validation import check_is_fitted
>>> from focalcal.posthoc import FocalTemperatureScaling, TemperatureScaling
>>> rng = np.random.default_rng(0)
>>> z = 2 * rng.standard_normal((600, 3))
>>> y = (z + rng.gumbel(size=z.shape)).argmax(1)   # the logits are too sharp by a factor of 2
>>> pipe = make_pipeline(TemperatureScaling()).fit(3 * z, y)
>>> check_is_fitted(pipe)
>>> type(pipe.predict_proba(3 * z)).__name__      # NumPy in, NumPy out
'ndarray'
>>> search = GridSearchCV(FocalTemperatureScaling(temperatures=np.arange(1, 101) / 20),
...                       {"gammas": [(0.0,), (0.0, 0.5, 1.0)]}, scoring="neg_log_loss", cv=3).fit(z, y)
>>> sorted(search.best_params_)
['gammas']

Selection criterion
-------------------
:class:`TemperatureScaling` and :class:`FocalTemperatureScaling` both select by the negative
log-likelihood unless told otherwise (``criterion="nll"``): a proper scoring rule with no binning
choice, Guo et al.'s criterion for TS, and one of the two K&K report for focal TS. Selected by
different criteria the two are not comparable (each wins on its own criterion). With the same
criterion they are: focal TS's family contains TS (``gamma_ev = 0``), so with ``0`` among the
``gammas`` it cannot score worse on the fitting set than TS on the same temperature grid. For the
ECE-selected variants of the papers, pass ``criterion="ece"`` (Mukhoti et al.) or
``criterion="ece_mass"`` (Komisarenko & Kull) to both.

Warnings for probable misuse
----------------------------
``fit`` warns (``UserWarning``) when its ``logits`` look like probabilities (every entry in
[0, 1], every row summing to 1 within the probability tolerance of :mod:`focalcal.metrics`; pass logits or ``log(probs)``), and when a fitted
parameter stops at the edge of its search range (TS: ``bounds`` or ``grid``; focal TS:
``temperatures`` or ``gammas``), which on uninformative logits means the optimum lies outside.
The second is a :class:`SearchRangeWarning` (a ``UserWarning``), so that code that fits on a
fixed published grid on purpose can filter it alone
(``warnings.simplefilter("ignore", SearchRangeWarning)``).

Using a calibrator before ``fit`` raises :class:`NotFittedError` (a ``ValueError`` and
``AttributeError``; scikit-learn's own ``NotFittedError``'s subclass where scikit-learn is
importable). TS, focal TS, Psi and ensemble TS never change the argmax: temperature scaling with
``T > 0`` and the focal map (Charoenphakdee et al. 2021, Prop. 12) are order-preserving on the top
class. Vector and matrix scaling, Dirichlet calibration, histogram binning and isotonic regression
can change it (and with it the accuracy); the non-parametric two floor their probabilities at
``1e-12`` so that their log-probabilities stay finite (see their docstrings).

Which paper each calibrator follows
-----------------------------------
:class:`TemperatureScaling`
    Guo et al. (2017) with ``criterion="nll"`` (a robust 1-D root search, see below);
    Mukhoti et al. (2020, Sec. 5) with ``criterion="ece"``: grid search of ``T`` in
    ``0.1, 0.2, ..., 10`` minimising the equal-width 15-bin ECE; ``criterion="ece_mass"`` selects on
    the equal-mass ECE (the criterion of Komisarenko & Kull 2024, Sec. 5.1); and
    Charoenphakdee et al. (2021, Sec. 6.1) **TS_FL** with ``criterion="focal"``: ``T`` minimises the
    focal loss with the training ``gamma`` on the fitting set.
:class:`FocalTemperatureScaling`
    Komisarenko & Kull (2024), Sec. 4.2 and 5.1: ``p = focal_map(softmax(z / T), gamma_ev)`` with the
    pair ``(gamma_ev, T)`` selected jointly, by a full grid search (their experiments) or by the
    cheaper "3m" line search they propose in Sec. 5.2 (see the class docstring).
:class:`PsiCorrection`
    Charoenphakdee et al. (2021), Thm. 11: ``Psi^gamma(softmax(z))`` with the training ``gamma``;
    nothing is fitted.
:class:`HistogramBinning`
    Zadrozny & Elkan (2001), Guo et al. (2017, Sec. 4.1): equal-mass (or equal-width) bins of the
    top-label confidence or of every class's probability. Does **not** preserve the argmax.
:class:`IsotonicCalibration`
    Zadrozny & Elkan (2002): one-vs-rest isotonic regression of the softmax probabilities,
    renormalised. Does **not** preserve the argmax.
:class:`VectorScaling`, :class:`MatrixScaling`
    Guo et al. (2017): ``softmax(v * z + b)`` and ``softmax(W z + b)``, the latter with Kull et al.'s
    (2019) off-diagonal and intercept regularisation (ODIR). They do **not** preserve the argmax.
:class:`DirichletCalibration`
    Kull et al. (2019): ``softmax(W log softmax(z) + b)`` with ODIR or L2. Does **not** preserve the
    argmax.
:class:`EnsembleTemperatureScaling`
    Zhang et al. (2020): ``w_0 softmax(z / T) + w_1 softmax(z) + w_2 / K``. Preserves the argmax.
    These four live in the private module ``focalcal._scaling`` (its docstring: how they are fitted).

Tie-breaking of grid searches
-----------------------------
Grid scores within ``1e-12 * max(1, |best|)`` of the best score count as ties (so that rounding
noise cannot decide). Among ties the calibrator closest to the identity wins: the smallest
``|gamma|``, then the smallest ``|log T|``, then the first in evaluation order (for a grid: the
``gammas`` in the order given, then the ``temperatures`` in the order given).

How the focal-TS grid is evaluated
----------------------------------
The criteria need, per sample and per ``(gamma, T)``, only the mapped probability of the top class
(ECE; the focal map keeps the argmax) and of the true class (NLL). Both are computed in float64 by
the exact kernel of the private module ``focalcal._fts_search``, whose docstring gives the formulas,
the clamping that keeps subnormal numbers (and ``exp``'s slow path) out, and the fast search: by
default (``method="fast"``) a lower bound of the score over boxes of pairs rules most of the grid
out, and only the pairs it cannot rule out are scored exactly. The selected pair and its score are
those of the full search (``method="exact"``; see ``tests/test_posthoc_fast.py`` and
``bench/bench_posthoc.py``).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np
import torch
from scipy.optimize import brentq, minimize_scalar

from . import maps
from ._validation import (
    ArrayLike,
    check_choice,
    check_gamma,
    check_int,
    check_logits,
)
from . import _calibrators as _cal
from . import _fts_bounds as _fast
from . import _fts_search as _fts
from ._calibrators import SearchRangeWarning
from ._binning import HistogramBinning, IsotonicCalibration
from ._estimator import _Calibrator, not_fitted_error

__all__ = [
    "KK_GAMMAS",
    "KK_TEMPERATURES",
    "MUKHOTI_TEMPERATURES",
    "DirichletCalibration",
    "EnsembleTemperatureScaling",
    "FocalTemperatureScaling",
    "HistogramBinning",
    "IsotonicCalibration",
    "MatrixScaling",
    "NotFittedError",
    "PsiCorrection",
    "SearchRangeWarning",
    "TemperatureScaling",
    "VectorScaling",
    "focal_ts_scores",
]

#: gamma_ev grid of Komisarenko & Kull (2024), Sec. 5.1
KK_GAMMAS: tuple[float, ...] = (-0.5, -0.25, 0.05, 0.25, 0.37, 0.5, 0.75, 1.0, 5.0)
#: temperature grid of Komisarenko & Kull (2024), Sec. 5.1: 0.01, 0.02, ..., 5.00 (500 values)
KK_TEMPERATURES: tuple[float, ...] = tuple(k / 100 for k in range(1, 501))
#: temperature grid of Mukhoti et al. (2020), Sec. 5: 0.1, 0.2, ..., 10.0 (100 values)
MUKHOTI_TEMPERATURES: tuple[float, ...] = tuple(k / 10 for k in range(1, 101))

TS_CRITERIA = ("nll", "ece", "ece_mass", "focal")
FTS_CRITERIA = ("ece_mass", "ece", "nll")
FTS_SEARCHES = ("grid", "line")

FTS_METHODS = ("fast", "exact")


def __getattr__(name: str) -> Any:
    # NotFittedError is made on first access (focalcal._estimator.not_fitted_error)
    if name == "NotFittedError":
        return not_fitted_error()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")



# ============================================================================================
# argument handling
# ============================================================================================

def _select(scores: torch.Tensor, gammas: torch.Tensor, temps: torch.Tensor) -> int:
    """Index of the best (smallest) score, ties broken towards the identity map (module docs)."""
    return _fts.select(scores.detach().to(torch.float64).cpu().numpy(), gammas.numpy(), temps.numpy())


def focal_ts_scores(logits: ArrayLike, labels: ArrayLike, *, gammas: Sequence[float] = KK_GAMMAS,
                    temperatures: Sequence[float] = KK_TEMPERATURES, criterion: str = "nll",
                    n_bins: int = 15) -> torch.Tensor:
    r"""Selection score of focal temperature scaling on a whole ``(gamma, T)`` grid.

    Scores ``p = focal_map(softmax(logits / T), gamma)`` for every ``gamma`` in ``gammas`` and
    ``T`` in ``temperatures`` (Komisarenko & Kull 2024, Sec. 4.2), vectorised (see the module
    docstring); the same numbers as a loop over :func:`focalcal.maps.focal_map_from_logits` and
    :func:`focalcal.metrics.ece` / :func:`focalcal.metrics.nll`, up to rounding.

    Parameters
    ----------
    logits : Tensor, shape (N, K)
        Finite scores of the fitting set (computed in float64 whatever their dtype).
    labels : Tensor, shape (N,)
        Integer labels in ``[0, K)``.
    gammas : sequence of float, each ``> -1``
        ``gamma = 0`` is plain temperature scaling.
    temperatures : sequence of float, each ``> 0``
    criterion : {"nll", "ece_mass", "ece"}
        Mean negative log-likelihood (the default, as in :class:`FocalTemperatureScaling`),
        equal-mass ECE (K&K's choice for their ECE tables) or equal-width ECE (Mukhoti's).
    n_bins : int
        Bins of the ECE (15 in both papers).

    Returns
    -------
    Tensor, shape (len(gammas), len(temperatures)), float64
        Fractions (ECE) or nats (NLL); smaller is better.

    Examples
    --------
    >>> from focalcal.posthoc import focal_ts_scores
    >>> import torch
    >>> g = torch.Generator().manual_seed(0)
    >>> z = 2 * torch.randn(500, 3, generator=g, dtype=torch.float64)
    >>> labels = torch.multinomial(torch.softmax(z, 1), 1, generator=g).squeeze(1)
    >>> logits = 3 * z  # an over-confident model: the calibrating T is about 3
    >>> scores = focal_ts_scores(logits, labels, gammas=[0.0, 0.5, 1.0], temperatures=[1.0, 2.0, 3.0, 4.0])
    >>> scores.shape
    torch.Size([3, 4])
    >>> i = int(scores.argmin())
    >>> divmod(i, 4)  # (gamma index, temperature index) of the least NLL
    (0, 2)
    """
    z, y = _cal.check_fit_args(logits, labels, "focal_ts_scores")
    g = _cal.check_grid(gammas, "gammas", lower=-1.0)
    t = _cal.check_grid(temperatures, "temperatures", positive=True)
    check_choice(criterion, "criterion", FTS_CRITERIA)
    n_bins = check_int(n_bins, "n_bins")
    prob = _fts.Problem(z, y, dedupe=criterion != "nll")
    with _fts.workers(z.device) as pool:
        return _fts.grid_scores(prob, t, g, criterion, n_bins, pool)


# ============================================================================================
# calibrators
# ============================================================================================

class TemperatureScaling(_Calibrator):
    r"""Temperature scaling: ``p = softmax(z / T)`` with one scalar ``T > 0`` fitted on held-out data.

    Parameters
    ----------
    criterion : {"nll", "ece", "ece_mass", "focal"}
        What ``T`` minimises on the fitting set (default ``"nll"``, as for
        :class:`FocalTemperatureScaling`; see "Selection criterion" in the module docstring):

        * ``"nll"`` (Guo et al. 2017): the mean negative log-likelihood. ``NLL(1/T)`` is convex in
          ``beta = 1/T`` (a log-sum-exp of linear functions), so its derivative
          ``mean(E_softmax[z] - z_y)`` is increasing in ``beta`` and its root is found by Brent's
          method on ``log T`` in ``bounds``, in float64 (no gradient steps that could stop early
          or leave ``T > 0``). If the derivative has no sign change in ``bounds`` the minimiser lies
          outside and the nearer bound is returned (e.g. a perfectly classified fitting set, whose
          NLL keeps falling as ``T -> 0``). With ``grid`` given, the grid point of least NLL is
          taken instead (the protocol of Komisarenko & Kull 2024, Sec. 5.1).
        * ``"ece"`` (Mukhoti et al. 2020): equal-width ``n_bins``-bin ECE, by grid search over
          ``grid`` (default :data:`MUKHOTI_TEMPERATURES` = 0.1, 0.2, ..., 10).
        * ``"ece_mass"``: the same with equal-mass bins (K&K's criterion).
        * ``"focal"`` (Charoenphakdee et al. 2021, **TS_FL**): the mean focal loss
          :math:`-(1-q_y)^\gamma\log q_y` of ``softmax(z / T)`` with ``gamma`` (the training
          ``gamma``), computed in log space. It need not be unimodal in ``T``, so it is evaluated on
          201 log-spaced temperatures in ``bounds`` and refined by bounded Brent search between
          the neighbours of the best one (or taken on ``grid`` when given).
    grid : sequence of float, optional
        Candidate temperatures (all ``> 0``). Required shape: 1-D. Ties: see the module docstring.
    gamma : float, optional
        Focal-loss ``gamma >= 0``; required with ``criterion="focal"``, not allowed otherwise.
    psi : bool
        Only with ``criterion="focal"``. Charoenphakdee et al. report TS_FL both without
        ("ECE-raw": the TS_FL paradigm itself outputs ``softmax(z / T)``, the estimate of the
        focal-risk minimiser) and with their correction ("ECE-Psi": ``Psi^gamma(softmax(z / T))``,
        the class posterior by their Thm. 11; Fig. 6 finds it preferable). ``psi=False`` (default)
        gives the former, ``psi=True`` the latter.
    n_bins : int
        Bins of the ECE criteria.
    bounds : (float, float)
        Search interval for ``T`` of the continuous fits (``"nll"`` and ``"focal"`` without grid).

    Attributes
    ----------
    temperature_ : float
        The fitted ``T``.
    best_score_ : float
        The criterion at ``temperature_`` on the fitting set.
    scores_ : Tensor, shape (n_T,)
        Grid searches only: the criterion at every grid temperature.
    n_classes_ : int

    Examples
    --------
    >>> from focalcal.posthoc import TemperatureScaling
    >>> import torch
    >>> g = torch.Generator().manual_seed(0)
    >>> z = 2 * torch.randn(500, 3, generator=g, dtype=torch.float64)
    >>> labels = torch.multinomial(torch.softmax(z, 1), 1, generator=g).squeeze(1)
    >>> logits = 3 * z  # an over-confident model: the calibrating T is about 3
    >>> ts = TemperatureScaling().fit(logits, labels)  # criterion='nll'
    >>> round(ts.temperature_, 2)
    2.87
    >>> bool(torch.allclose(ts.predict_proba(logits).sum(1), torch.ones(500, dtype=torch.float64)))
    True
    >>> TemperatureScaling('ece').fit(logits, labels).temperature_  # Mukhoti's grid 0.1, ..., 10
    2.7
    >>> ts.get_params()
    {'bounds': (0.01, 100.0), 'criterion': 'nll', 'gamma': None, 'grid': None, 'n_bins': 15, 'psi': False}
    >>> ts.set_params(criterion='ece_mass').criterion
    'ece_mass'
    """

    _fitted_names = ("temperature_", "best_score_", "scores_", "n_classes_")

    def __init__(self, criterion: str = "nll", grid: Sequence[float] | None = None, *,
                 gamma: float | None = None, psi: bool = False, n_bins: int = 15,
                 bounds: tuple[float, float] = (1e-2, 1e2)) -> None:
        super().__init__()
        self.criterion, self.grid, self.gamma, self.psi = criterion, grid, gamma, psi
        self.n_bins, self.bounds = n_bins, bounds
        self._validate_params()

    def _validate_params(self) -> None:
        criterion, gamma = check_choice(self.criterion, "criterion", TS_CRITERIA), self.gamma
        if criterion == "focal":
            if gamma is None:
                raise ValueError("criterion='focal' needs the focal-loss gamma (gamma >= 0), "
                                 "e.g. TemperatureScaling('focal', gamma=3.0)")
            self._gamma: float | None = check_gamma(gamma, "gamma", minimum=0.0)
        else:
            if gamma is not None:
                raise ValueError(f"gamma is only used with criterion='focal' (got criterion={criterion!r}); "
                                 f"for the focal map after TS use FocalTemperatureScaling")
            if self.psi:
                raise ValueError("psi=True is only meaningful with criterion='focal' (TS_FL + Psi)")
            self._gamma = None
        if not isinstance(self.psi, bool):
            raise ValueError(f"psi must be True or False, got {self.psi!r}")
        self._n_bins = check_int(self.n_bins, "n_bins")
        self._bounds = _cal.check_bounds(self.bounds)
        if self.grid is None:
            self._grid = (torch.tensor(MUKHOTI_TEMPERATURES, dtype=torch.float64)
                          if criterion in ("ece", "ece_mass") else None)
        else:
            self._grid = _cal.check_grid(self.grid, "grid", positive=True)

    def extra_repr(self) -> str:
        s = f"criterion={self.criterion!r}"
        if self._gamma is not None:
            s += f", gamma={self._gamma:g}, psi={self.psi}"
        if getattr(self, "_is_fitted", False):
            s += f", temperature_={self.temperature_:.6g}"
        return s

    def fit(self, logits: ArrayLike, labels: ArrayLike) -> TemperatureScaling:
        """Fit ``T`` on ``logits`` of shape ``(N, K)`` and ``labels`` of shape ``(N,)``; return ``self``."""
        z, y = _cal.check_fit_args(logits, labels, "TemperatureScaling.fit")
        gamma = 0.0 if self._gamma is None else self._gamma
        self.scores_ = None
        grid = self._grid
        if grid is not None:
            scores = _cal.ts_grid_scores(z, y, grid, self.criterion, gamma, self._n_bins)
            i = _select(scores, torch.zeros_like(grid), grid)
            self.temperature_, self.best_score_ = float(grid[i]), float(scores[i])
            self.scores_ = scores
        elif self.criterion == "nll":
            # torch's intra-op threads off meanwhile: on a loaded machine their barriers cost 10-60x
            # in wall-clock time here (see focalcal._fts_search)
            with _fts.workers(z.device):
                self.temperature_ = self._fit_nll(z, y)
                self.best_score_ = _cal.nll_at(z, y, self.temperature_)
        else:
            self.temperature_, self.best_score_ = self._fit_focal(z, y, gamma)
        if grid is not None:
            _cal.warn_at_edge("TemperatureScaling.fit", "temperature", self.temperature_, float(grid.min()),
                          float(grid.max()), "grid", "a sequence of temperatures > 0")
        else:
            _cal.warn_at_edge("TemperatureScaling.fit", "temperature", self.temperature_, *self._bounds,
                          "bounds", "a pair (T_min, T_max)")
        self.n_classes_ = int(z.shape[1])
        self._is_fitted = True
        return self

    def _fit_nll(self, z: torch.Tensor, y: torch.Tensor) -> float:
        lo, hi = self._bounds

        def slope(log_t: float) -> float:  # decreasing in log T
            return _cal.nll_slope(z, y, math.exp(-log_t))

        s_lo, s_hi = slope(math.log(lo)), slope(math.log(hi))
        if s_lo <= 0:  # NLL still falling at T_min: the minimiser is below the bounds
            return lo
        if s_hi >= 0:  # NLL still falling at T_max
            return hi
        return math.exp(brentq(slope, math.log(lo), math.log(hi), xtol=1e-13, rtol=1e-14, maxiter=200))

    def _fit_focal(self, z: torch.Tensor, y: torch.Tensor, gamma: float) -> tuple[float, float]:
        lo, hi = self._bounds
        taus = torch.linspace(math.log(lo), math.log(hi), 201, dtype=torch.float64)
        risk = _cal.focal_risk(z, y, taus.exp(), gamma)
        i = int(torch.argmin(risk))
        a, b = float(taus[max(i - 1, 0)]), float(taus[min(i + 1, len(taus) - 1)])
        res = minimize_scalar(lambda t: float(_cal.focal_risk(z, y, torch.tensor([math.exp(t)],
                                                                             dtype=torch.float64), gamma)[0]),
                              bounds=(a, b), method="bounded", options={"xatol": 1e-10})
        if float(res.fun) <= float(risk[i]):
            return math.exp(float(res.x)), float(res.fun)
        return math.exp(float(taus[i])), float(risk[i])

    def forward(self, logits: ArrayLike) -> torch.Tensor:
        """Log-probabilities ``log softmax(logits / T)`` (or their Psi image), shape ``(..., K)``."""
        self._require_fitted()
        z = self._check_predict_logits(logits)
        if self.psi:
            return maps.log_focal_map_from_logits(z, self._gamma, self.temperature_)
        return torch.log_softmax(z / self.temperature_, dim=-1)


class FocalTemperatureScaling(_Calibrator):
    r"""Focal temperature scaling (Komisarenko & Kull 2024, Sec. 4.2).

    ``p = focal_map(softmax(z / T), gamma_ev)`` (:func:`focalcal.maps.focal_map_from_logits`: the
    focal calibration map of their Prop. 4, Eq. (1), after temperature scaling), with the pair
    ``(gamma_ev, T)`` chosen jointly to minimise ``criterion`` on the fitting set. The argmax is
    never changed, so accuracy is that of the logits.

    Parameters
    ----------
    gammas : sequence of float, each ``> -1``
        Candidate ``gamma_ev`` (default: the paper's ``-0.5, -0.25, 0.05, 0.25, 0.37, 0.5, 0.75,
        1, 5``). ``0`` would be plain TS.
    temperatures : sequence of float, each ``> 0``, optional
        Candidate ``T`` (default: the paper's ``0.01, 0.02, ..., 5``).
    criterion : {"nll", "ece_mass", "ece"}
        NLL (the default; the paper's "log-loss" selection, and the default of
        :class:`TemperatureScaling`, so that the two compare like with like: see "Selection
        criterion" in the module docstring), equal-mass ``n_bins``-bin ECE (the paper's ECE
        selection; pass it to reproduce their ECE tables) or equal-width ECE.
    search : {"grid", "line"}
        ``"grid"``: the best of all ``len(gammas) * len(temperatures)`` pairs (the paper's
        experiments).
        ``"line"``: the cheaper "3m" search of Sec. 5.2. With ``m = len(temperatures)``:

        1. for each of the two anchors ``line_gammas = (g1, g2)`` the best ``T`` on the
           temperature grid (``2m`` evaluations), giving ``(g1, T1)`` and ``(g2, T2)``;
        2. the line ``T(gamma) = T1 + (T2 - T1) (gamma - g1) / (g2 - g1)`` through them (the optimal
           pairs lie close to a line in the ``(gamma_ev, T)`` plane, their Fig. 8);
        3. ``m`` points along it: ``gamma`` equally spaced over ``[min(gammas), max(gammas)]``
           and ``T(gamma)`` clipped to ``[min(temperatures), max(temperatures)]`` (``m``
           evaluations);
        4. the best of all ``3m`` evaluated pairs (ties as in the module docstring).

        The paper leaves the anchors and the parametrisation of the line open ("two arbitrary
        gamma_ev"); the default anchors are ``gamma = 0`` (plain TS) and ``gamma = 1``.
    n_bins : int
        Bins of the ECE criteria (15 in the paper).
    line_gammas : (float, float)
        The two anchor gammas of ``search="line"`` (distinct, each ``> -1``).
    method : {"fast", "exact"}
        How the pairs are scored; both select the same pair with the same score.
        ``"exact"``: every pair (grid) or every one of the ``3m`` pairs (line) in float64.
        ``"fast"``: only the pairs that a lower bound of the score cannot rule out (see the module
        docstring); on the released networks a few per cent of the paper's grid, about 3x (K = 10)
        to 12x (K = 100) faster than ``"exact"`` and over 50x faster than a loop over (gamma, T)
        (``bench/bench_posthoc.py``). With a gamma of magnitude above 600 it scores every pair.

    Attributes
    ----------
    gamma_ev_ : float
        The selected ``gamma_ev`` of the focal map (the ``gamma_ev`` column of the results tables).
    temperature_ : float
    best_score_ : float
        The criterion of the selected pair on the fitting set.
    scores_ : Tensor, shape (len(gammas), len(temperatures))
        ``search="grid"``: the whole exact score grid (``None`` for ``"line"``).
    candidates_ : Tensor, shape (n_pairs, 3)
        Every ``(gamma, T, exact score)`` of the search in evaluation order (for ``"grid"``:
        gamma-major; for ``"line"``: the ``2m`` anchor pairs, then the ``m`` line pairs).
        After a ``method="fast"`` fit these two are computed on first access (the cost of an
        exact fit; the fitting set is kept until then) and travel in ``state_dict`` only once
        computed (a calibrator loaded from an earlier state has ``None``).
    n_exact_ : int
        Pairs scored exactly by the fit.
    line_ : tuple (float, float)
        ``search="line"``: intercept and slope of ``T(gamma) = intercept + slope * gamma``.
    n_classes_ : int

    Examples
    --------
    >>> from focalcal.posthoc import FocalTemperatureScaling
    >>> import torch
    >>> g = torch.Generator().manual_seed(0)
    >>> z = 2 * torch.randn(500, 3, generator=g, dtype=torch.float64)
    >>> labels = torch.multinomial(torch.softmax(z, 1), 1, generator=g).squeeze(1)
    >>> logits = 3 * z  # an over-confident model: the calibrating T is about 3
    >>> fts = FocalTemperatureScaling(temperatures=[t / 10 for t in range(10, 51)]).fit(logits, labels)
    >>> fts.gamma_ev_, fts.temperature_
    (0.25, 3.2)
    >>> round(fts.best_score_, 4)  # the NLL of the selected pair on the fitting set
    0.5855
    >>> fts.predict_proba(logits[:2]).argmax(1) == logits[:2].argmax(1)
    tensor([True, True])
    """

    _fitted_names = ("gamma_ev_", "temperature_", "best_score_", "scores_", "candidates_", "line_",
                     "n_exact_", "n_classes_")
    # computed on first access after a fast fit (see ``method``)
    _lazy_names = {"scores_": "_scores", "candidates_": "_candidates"}

    def __init__(self, gammas: Sequence[float] = KK_GAMMAS, temperatures: Sequence[float] | None = None,
                 *, criterion: str = "nll", search: str = "grid", n_bins: int = 15,
                 line_gammas: tuple[float, float] = (0.0, 1.0), method: str = "fast") -> None:
        super().__init__()
        self.gammas, self.temperatures, self.criterion, self.search = gammas, temperatures, criterion, search
        self.n_bins, self.line_gammas, self.method = n_bins, line_gammas, method
        self._validate_params()

    def _validate_params(self) -> None:
        self._gammas = _cal.check_grid(self.gammas, "gammas", lower=-1.0)
        self._temperatures = _cal.check_grid(KK_TEMPERATURES if self.temperatures is None else self.temperatures,
                                         "temperatures", positive=True)
        check_choice(self.criterion, "criterion", FTS_CRITERIA)
        check_choice(self.search, "search", FTS_SEARCHES)
        check_choice(self.method, "method", FTS_METHODS)
        self._n_bins = check_int(self.n_bins, "n_bins")
        lg = _cal.check_grid(self.line_gammas, "line_gammas", lower=-1.0)
        if lg.numel() != 2 or float(lg[0]) == float(lg[1]):
            raise ValueError(f"line_gammas must be two distinct gammas > -1, got {self.line_gammas!r}")
        self._line_gammas = (float(lg[0]), float(lg[1]))

    def extra_repr(self) -> str:
        s = f"criterion={self.criterion!r}, search={self.search!r}, method={self.method!r}"
        if getattr(self, "_is_fitted", False):
            s += f", gamma_ev_={self.gamma_ev_:g}, temperature_={self.temperature_:.6g}"
        return s

    @property
    def scores_(self) -> torch.Tensor | None:
        self._materialise()
        if "_scores" not in self.__dict__:
            raise AttributeError("scores_ is set by fit")
        return self.__dict__["_scores"]

    @scores_.setter
    def scores_(self, value: torch.Tensor | None) -> None:
        self.__dict__["_scores"] = value

    @property
    def candidates_(self) -> torch.Tensor | None:
        self._materialise()
        if "_candidates" not in self.__dict__:
            raise AttributeError("candidates_ is set by fit")
        return self.__dict__["_candidates"]

    @candidates_.setter
    def candidates_(self, value: torch.Tensor | None) -> None:
        self.__dict__["_candidates"] = value

    def fit(self, logits: ArrayLike, labels: ArrayLike) -> FocalTemperatureScaling:
        """Select ``(gamma_ev, T)`` on ``logits`` ``(N, K)`` and ``labels`` ``(N,)``; return ``self``.

        Warns (:class:`SearchRangeWarning`) if the selected ``T`` or ``gamma_ev`` lies at an edge of its grid
        (``temperatures`` / ``gammas``, with more than one value): the optimum may lie outside.
        """
        z, y = _cal.check_fit_args(logits, labels, "FocalTemperatureScaling.fit")
        prob = _fts.Problem(z, y, dedupe=self.criterion != "nll")
        biggest = max(float(self._gammas.abs().max()), *(abs(g) for g in self._line_gammas))
        fast = self.method == "fast" and biggest <= _fts.BIG_GAMMA
        self.line_, self.scores_ = None, None
        with _fts.workers(z.device) as pool:
            fit = self._fit_grid if self.search == "grid" else self._fit_line
            g_all, t_all, evaluated = fit(prob, fast, pool)
        flat = np.fromiter(sorted(evaluated), dtype=np.int64)
        s = np.array([evaluated[int(i)] for i in flat])
        i = int(flat[_fts.select(s, g_all[flat], t_all[flat])])
        self.gamma_ev_, self.temperature_, self.best_score_ = float(g_all[i]), float(t_all[i]), evaluated[i]
        self.n_exact_ = len(flat)
        temps, gams = self._temperatures, self._gammas
        _cal.warn_at_edge("FocalTemperatureScaling.fit", "temperature", self.temperature_, float(temps.min()),
                      float(temps.max()), "temperatures", "a sequence of temperatures > 0")
        _cal.warn_at_edge("FocalTemperatureScaling.fit", "gamma_ev", self.gamma_ev_, float(gams.min()),
                      float(gams.max()), "gammas", "a sequence of gammas > -1")
        self.__dict__["_pending"] = (prob, g_all, t_all) if fast else None
        if not fast:
            self.candidates_ = torch.from_numpy(np.stack([g_all, t_all, s], axis=1))
        self.n_classes_ = int(z.shape[1])
        self._is_fitted = True
        return self

    def _fit_grid(self, prob: _fts.Problem, fast: bool, pool) -> tuple[np.ndarray, np.ndarray, dict[int, float]]:
        gammas, temps = self._gammas.numpy(), self._temperatures.numpy()
        n_t = len(temps)
        g_all, t_all = np.repeat(gammas, n_t), np.tile(temps, len(gammas))
        self.scores_ = None
        if not fast:
            grid = _fts.grid_scores(prob, self._temperatures, self._gammas, self.criterion, self._n_bins, pool)
            self.scores_ = grid
            return g_all, t_all, dict(enumerate(grid.reshape(-1).tolist()))
        paths = _fast.product_paths(gammas, temps)
        return g_all, t_all, _fast.fast_scores(prob, paths, self.criterion, self._n_bins, pool)[0]

    def _line(self, t1: float, t2: float) -> tuple[torch.Tensor, torch.Tensor]:
        """The line of the 3m search through ``(g1, t1)`` and ``(g2, t2)``: its ``m`` pairs."""
        (g1, g2), temps = self._line_gammas, self._temperatures
        slope = (t2 - t1) / (g2 - g1)
        self.line_ = (t1 - slope * g1, slope)
        g_line = torch.linspace(float(self._gammas.min()), float(self._gammas.max()), len(temps),
                                dtype=torch.float64)
        t_line = (t1 + slope * (g_line - g1)).clamp(float(temps.min()), float(temps.max()))
        return g_line, t_line

    def _fit_line(self, prob: _fts.Problem, fast: bool, pool) -> tuple[np.ndarray, np.ndarray, dict[int, float]]:
        temps = self._temperatures.numpy()
        m, anchors = len(temps), self._line_gammas
        crit, nb = self.criterion, self._n_bins
        if fast:
            paths = _fast.product_paths(np.array(anchors), temps, group=0)  # one threshold per anchor
            ev = _fast.fast_scores(prob, paths, crit, nb, pool)[0]
        else:
            cols = _fts.exact_scores(prob, temps.tolist(), [list(anchors)] * m, crit, nb, pool)
            ev = {a * m + j: float(c[a]) for j, c in enumerate(cols) for a in range(2)}
        t_best = []
        for a, g in enumerate(anchors):
            idx = np.array(sorted(i for i in ev if a * m <= i < (a + 1) * m))
            s = np.array([ev[int(i)] for i in idx])
            t_best.append(float(temps[idx[_fts.select(s, np.full(len(idx), g), temps[idx - a * m])] - a * m]))
        g_line, t_line = self._line(*t_best)
        if fast:
            line = _fast.Path(t_line.numpy(), g_line.numpy(), 2 * m + np.arange(m))
            ev.update(_fast.fast_scores(prob, [line], crit, nb, pool)[0])
        else:
            cols = _fts.exact_scores(prob, t_line.tolist(), [[g] for g in g_line.tolist()], crit, nb, pool)
            ev.update({2 * m + j: float(c[0]) for j, c in enumerate(cols)})
        g_all = np.concatenate([np.full(m, anchors[0]), np.full(m, anchors[1]), g_line.numpy()])
        t_all = np.concatenate([temps, temps, t_line.numpy()])
        return g_all, t_all, ev

    def _materialise(self) -> None:
        """After a fast fit: the exact scores of every pair, on first access to scores_/candidates_."""
        pending = self.__dict__.get("_pending")
        if pending is None:
            return
        prob, g_all, t_all = pending
        with _fts.workers(prob.device) as pool:
            if self.search == "grid":
                grid = _fts.grid_scores(prob, self._temperatures, self._gammas, self.criterion, self._n_bins, pool)
                self.scores_, s_all = grid, grid.reshape(-1).numpy()
            else:
                m = len(self._temperatures)
                cols = _fts.exact_scores(prob, t_all[:m].tolist(), [list(self._line_gammas)] * m,
                                         self.criterion, self._n_bins, pool)
                line = _fts.exact_scores(prob, t_all[2 * m:].tolist(), [[g] for g in g_all[2 * m:].tolist()],
                                         self.criterion, self._n_bins, pool)
                s_all = np.concatenate([[float(c[0]) for c in cols], [float(c[1]) for c in cols],
                                        [float(c[0]) for c in line]])
        self.candidates_ = torch.from_numpy(np.stack([g_all, t_all, s_all], axis=1))
        self.__dict__["_pending"] = None

    def get_extra_state(self) -> dict[str, object]:
        # the lazily computed grids travel only if they were computed
        state = {"_is_fitted": getattr(self, "_is_fitted", False)}
        for name in self._fitted_names:
            raw = self._lazy_names.get(name, name)
            if raw in self.__dict__:
                state[name] = self.__dict__[raw]
        return state

    def forward(self, logits: ArrayLike) -> torch.Tensor:
        """Log-probabilities ``log focal_map(softmax(logits / T), gamma_ev)``, shape ``(..., K)``."""
        self._require_fitted()
        z = self._check_predict_logits(logits)
        return maps.log_focal_map_from_logits(z, self.gamma_ev_, self.temperature_)


class PsiCorrection(_Calibrator):
    r"""Charoenphakdee et al. (2021) correction ``Psi^gamma(softmax(z))`` for focal-trained models.

    ``Psi^gamma_i(v) = h^gamma(v_i) / sum_l h^gamma(v_l)``, ``h^gamma(v) = v / phi^gamma(v)`` (their
    Thm. 11, Eqs. 12-13) maps the focal-risk minimiser to the class posterior; it is the same map as
    Komisarenko & Kull's focal calibration map (:func:`focalcal.maps.focal_map`). Nothing is fitted:
    ``gamma`` is the one the network was *trained* with, and the transform is usable without
    ``fit`` (``fit`` only validates its input and returns ``self``, so it fits in pipelines).

    Parameters
    ----------
    gamma : float, ``>= 0``
        The training focal-loss ``gamma``. ``0`` is the identity (cross-entropy is proper).

    Examples
    --------
    >>> import torch
    >>> from focalcal.posthoc import PsiCorrection
    >>> logits = torch.tensor([[2.0, 0.0, -1.0]])
    >>> PsiCorrection(gamma=3.0).predict_proba(logits)
    tensor([[9.9792e-01, 1.5110e-03, 5.7037e-04]])
    >>> torch.softmax(logits, 1)
    tensor([[0.8438, 0.1142, 0.0420]])
    >>> bool(torch.allclose(PsiCorrection(gamma=0.0).predict_proba(logits), torch.softmax(logits, 1)))
    True
    """

    _fitted_names = ("n_classes_",)

    def __init__(self, gamma: float) -> None:
        super().__init__()
        self.gamma = gamma
        self._validate_params()
        self._is_fitted = True

    def _validate_params(self) -> None:
        self._gamma = check_gamma(self.gamma, "gamma", minimum=0.0)

    def extra_repr(self) -> str:
        return f"gamma={self._gamma:g}"

    def fit(self, logits: ArrayLike, labels: ArrayLike) -> PsiCorrection:
        """Validate ``logits`` ``(N, K)`` and ``labels`` ``(N,)``; nothing to fit. Returns ``self``."""
        z, _ = _cal.check_fit_args(logits, labels, "PsiCorrection.fit")
        self.n_classes_ = int(z.shape[1])
        return self

    def forward(self, logits: ArrayLike) -> torch.Tensor:
        """Log-probabilities ``log Psi^gamma(softmax(logits))``, shape ``(..., K)``."""
        z = self._check_predict_logits(logits)
        return maps.log_focal_map_from_logits(z, self._gamma)


# the parametric calibrators subclass _Calibrator, so they are imported once it exists
from ._scaling import (DirichletCalibration, EnsembleTemperatureScaling, MatrixScaling,  # noqa: E402
                       VectorScaling)

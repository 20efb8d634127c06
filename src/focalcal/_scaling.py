r"""Parametric post-hoc calibrators beyond temperature scaling (exported by :mod:`focalcal.posthoc`).

* :class:`VectorScaling` (Guo et al. 2017): ``softmax(v * z + b)``, one scale and one intercept per
  class;
* :class:`MatrixScaling` (Guo et al. 2017): ``softmax(W z + b)``, with the off-diagonal and
  intercept regularisation (ODIR) of Kull et al. (2019);
* :class:`DirichletCalibration` (Kull et al. 2019): ``softmax(W log softmax(z) + b)``, a linear map
  on the log-probabilities, with ODIR or L2 regularisation;
* :class:`EnsembleTemperatureScaling` (Zhang et al. 2020, "Mix-n-Match"): a convex combination of
  TS, the uncalibrated softmax and the uniform distribution.

Which preserve the argmax
-------------------------
Ensemble temperature scaling does: each of its three components orders the classes as the logits
do (or ties them all), so their mixture with non-negative weights keeps the class of the largest
logit on top. Vector scaling, matrix scaling and Dirichlet calibration do **not**: a per-class
intercept, per-class scales or off-diagonal weights can move another class on top (that is how they
can raise accuracy, and how they can lower it). ``tests/test_scaling.py`` checks both.

How the linear calibrators are fitted
-------------------------------------
The regularised mean negative log-likelihood is convex in ``(W, b)``; it is minimised by full-batch
L-BFGS in float64 (:func:`_lbfgs`, in torch: scipy's ``L-BFGS-B`` spent more time in its own
multi-threaded BLAS calls than in the objective at ``K = 100`` on a busy machine), the objective and
its gradient ``(softmax - onehot)^T x / N`` computed with two matrix products, starting from the
temperature-scaling solution ``W = I / T``, ``b = 0`` (:class:`~focalcal.posthoc.TemperatureScaling`
with ``criterion="nll"``; for Dirichlet calibration the same start, since
``softmax(log softmax(z) / T) = softmax(z / T)``). For the optimiser the features with a constant
column, ``x~ = [x 1]``, are whitened by ``(E[x~ x~^T] + D)^(-1/2)``, with ``D`` the penalty's
curvature per weight over the data's, so that the data term and the penalty (both of ``(W, b)``) are
about equally curved in every direction; the objective is unchanged. On 10k x 100 logits, random
or a released CIFAR-100 network's, matrix scaling converges in under 100 iterations and Dirichlet
calibration in a few hundred (``bench/bench_calibrators.py``). The fit stops when the largest
gradient entry with respect to ``(W, b)`` falls below ``tol`` (vector scaling: ``w`` and the
intercept of the centred features), or after ``max_iter`` iterations, or when the line search finds
no decrease (then it warns).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch
from scipy.optimize import minimize, minimize_scalar

from . import _calibrators as _cal
from ._validation import ArrayLike, check_choice, check_int, check_positive
from ._estimator import _Calibrator
from .posthoc import TemperatureScaling

__all__ = ["DirichletCalibration", "EnsembleTemperatureScaling", "MatrixScaling", "VectorScaling"]

LINEAR_REGULARISATIONS = ("odir", "l2", "none")
#: ``reg_lambda="auto"``: ``lambda = K (K - 1) / 100``, the weight 0.01 on each off-diagonal entry (see MatrixScaling)
AUTO = "auto"
ETS_LOSSES = ("mse", "nll")


def _check_nonnegative(x: float, name: str) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a real number >= 0, got {x!r}") from err
    if not (math.isfinite(v) and v >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {v}")
    return v


def _ts_temperature(z: torch.Tensor, y: torch.Tensor) -> float:
    """The NLL temperature (the start of the linear fits); its edge warning is not the caller's."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", _cal.SearchRangeWarning)
        return TemperatureScaling().fit(z, y).temperature_


def _lbfgs(fun, gradient_max, x: torch.Tensor, tol: float, max_iter: int,
           memory: int = 20) -> tuple[torch.Tensor, int, float, str]:
    """Minimise a smooth convex ``fun`` (returning its value and gradient) by L-BFGS from ``x``.

    Two-loop recursion over the last ``memory`` steps, backtracking line search (Armijo condition or
    approximate Wolfe, quadratic interpolation); a step with no curvature (``s . y <= 0``) is not stored. Stops when
    ``gradient_max(gradient) <= tol`` ("converged"), after ``max_iter`` iterations, or when the line
    search finds no decrease. Returns ``(x, iterations, gradient_max, reason)``. (In torch rather than scipy's
    ``L-BFGS-B``: its compact-form update runs BLAS calls that, multi-threaded on a busy machine,
    cost more than the objective at ``K = 100``.)
    """
    f, g = fun(x)
    hist: list[tuple[torch.Tensor, torch.Tensor, float]] = []
    for it in range(max_iter):
        gm = gradient_max(g)
        if gm <= tol:
            return x, it, gm, "converged"
        d = -g
        alpha = []
        for s, yv, rho in reversed(hist):
            alpha.append(rho * float(s @ d))
            d = d - alpha[-1] * yv
        if hist:
            s, yv, _ = hist[-1]
            d = d * (float(s @ yv) / float(yv @ yv))
        else:
            d = d / max(float(g.abs().sum()), 1.0)
        for (s, yv, rho), al in zip(hist, reversed(alpha)):
            d = d + (al - rho * float(yv @ d)) * s
        slope = float(g @ d)
        if not slope < 0:  # not a descent direction: restart from the gradient
            hist, d = [], -g / max(float(g.abs().sum()), 1.0)
            slope = float(g @ d)
        step = 1.0
        for _ in range(40):
            f1, g1 = fun(x + step * d)
            slope1 = float(g1 @ d)
            # Armijo, or (once f differs from its start by rounding only) Hager & Zhang's approximate
            # Wolfe condition on the slope, which still tells a better point near the optimum
            if f1 <= f + 1e-4 * step * slope or (f1 <= f + 1e-12 * abs(f) and 0.9 * slope <= slope1 <= -0.8 * slope):
                break
            # minimiser of the quadratic through f, the slope and f1, kept within [0.1, 0.5] of the step
            q = -slope * step * step / (2 * (f1 - f - slope * step)) if math.isfinite(f1) else 0.1 * step
            step = min(max(q, 0.1 * step), 0.5 * step)
        else:
            return x, it, gm, "the line search found no decrease"
        s, yv = step * d, g1 - g
        sy = float(s @ yv)
        if sy > 1e-12 * float(yv @ yv):
            hist = (hist + [(s, yv, 1.0 / sy)])[-memory:]
        x, f, g = x + s, f1, g1
    return x, max_iter, gradient_max(g), "max_iter reached"


# ============================================================================================
# the linear calibrators: softmax(W x + b) on features x (logits or log-probabilities)
# ============================================================================================

class _LinearScaling(_Calibrator):
    """Shared fit of ``softmax(W x + b)``: ``W`` diagonal (vector scaling) or full."""

    _fitted_names = ("coef_", "intercept_", "n_iter_", "n_classes_")
    _diagonal = False

    def _validate_params(self) -> None:
        self._tol = check_positive(self.tol, "tol")
        self._max_iter = check_int(self.max_iter, "max_iter")
        if self._diagonal:
            return
        check_choice(self.regularization, "regularization", LINEAR_REGULARISATIONS)
        if isinstance(self.reg_lambda, str) and self.reg_lambda != AUTO:
            raise ValueError(f"reg_lambda must be 'auto' or a real number >= 0, got {self.reg_lambda!r}")
        self._reg_lambda = AUTO if self.reg_lambda == AUTO else _check_nonnegative(self.reg_lambda, "reg_lambda")
        if self.reg_mu is not None and self.regularization != "odir":
            raise ValueError(f"reg_mu is the intercept weight of regularization='odir' only (with 'l2' reg_lambda "
                             f"weighs the intercepts too); leave it None, got reg_mu={self.reg_mu!r}")
        self._reg_mu = None if self.reg_mu is None else _check_nonnegative(self.reg_mu, "reg_mu")

    def _weights(self, k: int) -> tuple[float, float]:
        """``(lambda, mu)`` for ``K = k`` classes (``"auto"``: ``K (K - 1) / 100``; ``mu`` defaults to ``lambda``)."""
        lam = k * (k - 1) / 100 if self._reg_lambda == AUTO else self._reg_lambda
        return lam, lam if self._reg_mu is None else self._reg_mu

    def _features(self, z: torch.Tensor) -> torch.Tensor:
        return z

    def _ridge(self, z: torch.Tensor, t: float, k: int) -> tuple[float, float]:
        """The penalty's curvature per weight over the data's, for ``W`` and for ``b``.

        The data term's curvature in a row of ``(W, b)`` is about ``s E[x~ x~^T]`` with ``s`` the mean
        of ``p_i (1 - p_i)`` at the start (``p = softmax(z / T)``), the penalty's ``2 c`` per weight;
        whitening by ``(E[x~ x~^T] + 2 c / s)^(-1/2)`` conditions their sum (whitening by the
        features' covariance alone made a large ``lambda`` or ``mu`` stiff along the small-variance
        directions, and the intercept penalty coupled to the features' mean).
        """
        if self.regularization == "none":
            return 0.0, 0.0
        lam, mu = self._weights(k)
        if self.regularization == "odir":
            c_w, c_b = lam / (k * (k - 1)), mu / k
        else:
            c_w = c_b = lam / (k * (k + 1))
        p = torch.softmax(z / t, dim=-1)
        s = max(float((p * (1 - p)).mean()), 1e-12)
        return 2 * c_w / s, 2 * c_b / s

    def _penalty(self, w: torch.Tensor, b: torch.Tensor, k: int) -> tuple[float, torch.Tensor, torch.Tensor]:
        """Penalty value and its gradients with respect to ``w`` and ``b``."""
        reg = "none" if self._diagonal else self.regularization
        if reg == "odir":
            lam, mu = self._weights(k)
            off = w.clone().fill_diagonal_(0.0)
            c_w = lam / (k * (k - 1))
            c_b = mu / k
            return (c_w * float((off ** 2).sum()) + c_b * float((b ** 2).sum()), 2 * c_w * off, 2 * c_b * b)
        if reg == "l2":
            c = self._weights(k)[0] / (k * (k + 1))
            return c * float((w ** 2).sum() + (b ** 2).sum()), 2 * c * w, 2 * c * b
        return 0.0, torch.zeros_like(w), torch.zeros_like(b)

    def _fit_diagonal(self, x: torch.Tensor, y: torch.Tensor, t: float):
        """Vector scaling on centred, standardised features ``a = (x - m) / sd``, parameters ``(v, c)``
        with ``w = v / sd``, ``b = c - w m`` (unregularised)."""
        n, k = x.shape
        rows = torch.arange(n, device=x.device)
        m = x.mean(0)
        xc = x - m
        sd = xc.std(0, correction=0)
        r = torch.where(sd > sd.max() * 1e-6, 1 / sd, torch.ones_like(sd))
        a = xc * r

        def objective(theta: torch.Tensor) -> tuple[float, torch.Tensor]:
            v, c = theta[:k], theta[k:]
            logp = torch.log_softmax(a * v + c, dim=-1)
            nll = -float(logp[rows, y].sum()) / n
            g = logp.exp_()
            g[rows, y] -= 1.0
            g /= n
            return nll, torch.cat([(g * a).sum(0), g.sum(0)])

        def gradient_max(grad: torch.Tensor) -> float:
            return max(float((grad[:k] / r).abs().max()), float(grad[k:].abs().max()))

        w0 = torch.full((k,), 1.0 / t, dtype=torch.float64, device=x.device)
        theta, n_iter, gmax, why = _lbfgs(objective, gradient_max, torch.cat([w0 / r, w0 * m]), self._tol,
                                          self._max_iter)
        w = theta[:k] * r
        return theta, n_iter, gmax, why, w, theta[k:] - w * m

    def _fit_full(self, x: torch.Tensor, y: torch.Tensor, t: float, z: torch.Tensor):
        """Matrix scaling of ``x``: optimised as ``U`` with ``[W b] = U R^T`` on ``a = [x 1] R``, where
        ``R = (E[x~ x~^T] + D)^(-1/2)``, ``x~ = [x 1]`` and ``D`` the penalty's curvature per weight over
        the data's (:meth:`_ridge`): the data term and the penalty, both of ``(W, b)``, are then
        about equally curved in every direction of ``U``."""
        n, k = x.shape
        rows = torch.arange(n, device=x.device)
        xt = torch.cat([x, torch.ones(n, 1, dtype=x.dtype, device=x.device)], dim=1)
        ridge_w, ridge_b = self._ridge(z, t, k)
        moment = xt.T @ xt / n
        moment.diagonal().add_(torch.tensor([ridge_w] * k + [ridge_b], dtype=x.dtype, device=x.device))
        ev, vec = torch.linalg.eigh(moment)
        sq = torch.where(ev > ev.max() * 1e-12, ev.sqrt(), torch.ones_like(ev))  # flat directions: unscaled
        r, r_inv = vec / sq, (vec * sq).T
        a = xt @ r

        def objective(theta: torch.Tensor) -> tuple[float, torch.Tensor]:
            u = theta.view(k, k + 1)
            logp = torch.log_softmax(a @ u.T, dim=-1)
            nll = -float(logp[rows, y].sum()) / n
            g = logp.exp_()
            g[rows, y] -= 1.0
            g /= n
            wb = u @ r.T
            pen, pw, pb = self._penalty(wb[:, :k], wb[:, k], k)
            return nll + pen, (g.T @ a + torch.cat([pw, pb[:, None]], dim=1) @ r).reshape(-1)

        def gradient_max(grad: torch.Tensor) -> float:
            return float((grad.view(k, k + 1) @ r_inv).abs().max())  # with respect to (W, b)

        wb0 = torch.cat([torch.eye(k, dtype=torch.float64, device=x.device) / t,
                         torch.zeros(k, 1, dtype=torch.float64, device=x.device)], dim=1)
        theta, n_iter, gmax, why = _lbfgs(objective, gradient_max, (wb0 @ r_inv.T).reshape(-1), self._tol,
                                          self._max_iter)
        wb = theta.view(k, k + 1) @ r.T
        return theta, n_iter, gmax, why, wb[:, :k], wb[:, k]

    def fit(self, logits: ArrayLike, labels: ArrayLike):
        """Fit ``coef_`` and ``intercept_`` on ``logits`` ``(N, K)`` and ``labels`` ``(N,)``; return ``self``.

        Warns (``UserWarning``) if L-BFGS stops (``max_iter``, or no decrease along its direction)
        before the gradient is below ``tol``.
        """
        name = type(self).__name__
        z, y = _cal.check_fit_args(logits, labels, f"{name}.fit")
        n, k = z.shape
        x = self._features(z)
        t = _ts_temperature(z, y)
        if self._diagonal:
            theta, n_iter, gmax, why, w, b = self._fit_diagonal(x, y, t)
        else:
            theta, n_iter, gmax, why, w, b = self._fit_full(x, y, t, z)
        if why != "converged":
            warnings.warn(f"{name}.fit: L-BFGS stopped after {n_iter} iterations ({why}) with the largest "
                          f"gradient entry {gmax:.3g} > tol={self._tol:g}; raise max_iter= or tol=",
                          UserWarning, stacklevel=2)
        self.coef_ = w.cpu().clone()
        self.intercept_ = b.cpu().clone()
        self.n_iter_ = int(n_iter)
        self.n_classes_ = int(k)
        self._is_fitted = True
        return self

    def forward(self, logits: ArrayLike) -> torch.Tensor:
        """Log-probabilities ``log softmax(W x + b)``, shape ``(..., K)``, in the dtype of ``logits``."""
        self._require_fitted()
        z = self._check_predict_logits(logits)
        x = self._features(z.to(torch.float64))
        w, b = self.coef_.to(x.device), self.intercept_.to(x.device)
        s = (x * w if self._diagonal else x @ w.T) + b
        return torch.log_softmax(s, dim=-1).to(z.dtype)

    def extra_repr(self) -> str:
        return f"regularization={self.regularization!r}, reg_lambda={self.reg_lambda!r}, reg_mu={self.reg_mu!r}"


class VectorScaling(_LinearScaling):
    r"""Vector scaling (Guo et al. 2017): ``p = softmax(v * z + b)``, ``v`` and ``b`` in ``R^K``.

    One scale and one intercept per class, fitted by minimising the mean negative log-likelihood
    on held-out data (unregularised, as in Guo et al.; see the module docstring for the fit).
    **It does not preserve the argmax** in general: the intercepts, and scales that differ between
    classes, can put another class on top.

    Parameters
    ----------
    tol : float
        L-BFGS stops when the largest gradient entry of the mean NLL is below ``tol``.
    max_iter : int
        Iteration cap of L-BFGS (a warning if reached before ``tol``).

    Attributes
    ----------
    coef_ : Tensor, shape (K,)
        The per-class scales ``v``.
    intercept_ : Tensor, shape (K,)
        The per-class intercepts ``b``.
    n_iter_ : int
        L-BFGS iterations of the fit.
    n_classes_ : int

    Examples
    --------
    >>> import torch
    >>> from focalcal.posthoc import VectorScaling
    >>> g = torch.Generator().manual_seed(0)
    >>> z = 2 * torch.randn(2000, 3, generator=g, dtype=torch.float64)
    >>> labels = torch.multinomial(torch.softmax(z + torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64), 1),
    ...                            1, generator=g).squeeze(1)
    >>> vs = VectorScaling().fit(3 * z, labels)  # over-confident, and class 0 under-predicted
    >>> vs.coef_.round(decimals=1), (vs.intercept_ - vs.intercept_.mean()).round(decimals=1)
    (tensor([0.3000, 0.3000, 0.3000], dtype=torch.float64), tensor([ 0.6000, -0.3000, -0.3000], dtype=torch.float64))
    >>> vs.predict_proba(3 * z[:2])
    tensor([[0.0451, 0.7656, 0.1893],
            [0.9871, 0.0089, 0.0040]], dtype=torch.float64)
    """

    _diagonal = True

    def __init__(self, *, tol: float = 1e-7, max_iter: int = 1000) -> None:
        super().__init__()
        self.tol, self.max_iter = tol, max_iter
        self._validate_params()

    def extra_repr(self) -> str:
        return ""


class MatrixScaling(_LinearScaling):
    r"""Matrix scaling (Guo et al. 2017) with ODIR (Kull et al. 2019): ``p = softmax(W z + b)``.

    ``W`` (``K x K``) and ``b`` minimise, on held-out logits ``z`` and labels ``y``,

    .. math::

        \frac1N \sum_n -\log p_{y_n}(z_n)
        + \frac{\lambda}{K(K-1)} \sum_{i \ne j} W_{ij}^2 + \frac{\mu}{K} \sum_j b_j^2

    (``regularization="odir"``, Kull et al.'s off-diagonal and intercept regularisation: the
    diagonal is free, so ``W = I / T`` costs nothing and a large ``lambda``, ``mu`` shrinks towards
    vector scaling without intercept), or with ``regularization="l2"``
    ``lambda / (K (K + 1)) * (sum W_ij^2 + sum b_j^2)``, or unregularised (``"none"``; with many
    classes it overfits). **It does not preserve the argmax**: off-diagonal weights and intercepts
    can put another class on top. See the module docstring for the fit (L-BFGS from the TS
    solution).

    Kull et al.'s package ``dirichletcal`` writes the same penalty on ``W - 1 w_K^T`` (its default
    ``ref_row=True`` subtracts the last row, which leaves the softmax unchanged but not the
    penalty), and clips probabilities to ``[eps, 1 - eps]`` inside its loss; we penalise ``W`` as
    the paper writes it and take the exact log-softmax, so with ``lambda, mu > 0`` our fit differs
    from the package's default (``tests/test_scaling.py`` shows by how much) and equals it with
    ``ref_row=False``.

    Parameters
    ----------
    reg_lambda : float ``>= 0`` or "auto"
        ``lambda``: weight of the off-diagonal penalty (of every weight for ``"l2"``). ``"auto"``
        (default) takes ``lambda = K (K - 1) / 100``: a weight of 0.01 on each off-diagonal entry
        whatever ``K``. Kull et al. choose ``lambda`` and ``mu`` by 5-fold cross-validation; fitted on
        the 5 000 validation logits of Mukhoti et al.'s released networks and scored on their test
        logits, ``lambda = mu`` in ``{0.01, 1, 10, 100, 1000, 10^4}`` gave the least test NLL at 1
        for two CIFAR-10 networks and at 100 for two CIFAR-100 ones, for matrix scaling and
        Dirichlet calibration alike, while the former default ``0.01`` lost to temperature scaling
        by 3.5-4.5 nats at ``K = 100`` (``tests/test_scaling.py`` checks the default against TS on a
        CIFAR-100 network). With few samples per class, or where a calibrator must be trusted
        unattended, cross-validate it (``GridSearchCV`` over ``reg_lambda``).
    reg_mu : float ``>= 0``, optional
        ``mu``: weight of the intercept penalty (``"odir"`` only); ``None`` (default) takes ``reg_lambda``.
    regularization : {"odir", "l2", "none"}
    tol, max_iter
        As in :class:`VectorScaling`.

    Attributes
    ----------
    coef_ : Tensor, shape (K, K)
        ``W`` (rows: output classes).
    intercept_ : Tensor, shape (K,)
    n_iter_ : int
    n_classes_ : int

    Examples
    --------
    >>> import torch
    >>> from focalcal.posthoc import MatrixScaling
    >>> g = torch.Generator().manual_seed(0)
    >>> z = 2 * torch.randn(2000, 3, generator=g, dtype=torch.float64)
    >>> labels = torch.multinomial(torch.softmax(z, 1), 1, generator=g).squeeze(1)
    >>> labels = torch.where(labels == 2, 1, labels)  # the network confuses class 1 for class 2
    >>> ms = MatrixScaling(reg_lambda=1e-3, reg_mu=1e-3).fit(z, labels)
    >>> ms.coef_.round(decimals=1)
    tensor([[ 0.8000, -0.2000, -0.2000],
            [-0.1000,  0.3000,  0.2000],
            [ 0.1000,  0.2000,  0.1000]], dtype=torch.float64)
    >>> (ms.predict_proba(z).argmax(1) == labels).double().mean() > (z.argmax(1) == labels).double().mean()
    tensor(True)
    """

    def __init__(self, reg_lambda: float | str = AUTO, reg_mu: float | None = None, *, regularization: str = "odir",
                 tol: float = 1e-7, max_iter: int = 1000) -> None:
        super().__init__()
        self.reg_lambda, self.reg_mu, self.regularization = reg_lambda, reg_mu, regularization
        self.tol, self.max_iter = tol, max_iter
        self._validate_params()


class DirichletCalibration(_LinearScaling):
    r"""Dirichlet calibration (Kull et al. 2019): ``p = softmax(W log q + b)``, ``q = softmax(z)``.

    Matrix scaling on the log-probabilities ``log q`` instead of the logits (the canonical
    parametrisation of Kull et al.'s Dirichlet calibration map), with the same objective and
    regularisations as :class:`MatrixScaling`: ``"odir"`` (the default, Kull et al.'s choice for
    neural networks) or ``"l2"`` (every weight and intercept, ``lambda / (K (K + 1))``).
    ``log q`` is the exact log-softmax of the logits in float64, so logits of ``+-1e4`` stay finite;
    Kull et al.'s package ``dirichletcal`` takes ``log`` of probabilities clipped at the smallest
    normal float (``log q >= -708``) and penalises ``W - 1 w_K^T`` (see :class:`MatrixScaling`),
    which is where our fits differ from its defaults. **It does not preserve the argmax.**

    Parameters
    ----------
    reg_lambda, reg_mu, regularization, tol, max_iter
        As in :class:`MatrixScaling`.

    Attributes
    ----------
    coef_ : Tensor, shape (K, K)
    intercept_ : Tensor, shape (K,)
    n_iter_ : int
    n_classes_ : int

    Examples
    --------
    >>> import torch
    >>> from focalcal.posthoc import DirichletCalibration
    >>> g = torch.Generator().manual_seed(0)
    >>> z = 2 * torch.randn(2000, 3, generator=g, dtype=torch.float64)
    >>> labels = torch.multinomial(torch.softmax(z / 2, 1), 1, generator=g).squeeze(1)
    >>> dc = DirichletCalibration(reg_lambda=1e-3, reg_mu=1e-3).fit(z, labels)
    >>> dc.coef_.diagonal().round(decimals=1)  # about 1 / 2: the logits are twice too sharp
    tensor([0.5000, 0.5000, 0.4000], dtype=torch.float64)
    >>> dc.predict_proba(z[:1].float())
    tensor([[0.0919, 0.5951, 0.3130]])
    """

    def __init__(self, reg_lambda: float | str = AUTO, reg_mu: float | None = None, *, regularization: str = "odir",
                 tol: float = 1e-7, max_iter: int = 1000) -> None:
        super().__init__()
        self.reg_lambda, self.reg_mu, self.regularization = reg_lambda, reg_mu, regularization
        self.tol, self.max_iter = tol, max_iter
        self._validate_params()

    def _features(self, z: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(z, dim=-1)


# ============================================================================================
# ensemble temperature scaling
# ============================================================================================

class EnsembleTemperatureScaling(_Calibrator):
    r"""Ensemble temperature scaling (Zhang et al. 2020, "Mix-n-Match", Sec. 3.1).

    ``p = w_0 softmax(z / T) + w_1 softmax(z) + w_2 / K`` with weights ``w >= 0`` summing to 1: a
    mixture of temperature scaling, the uncalibrated network and the uniform distribution. ``T`` is
    fitted first, then the weights with ``T`` fixed, both by minimising ``loss`` on held-out data:

    * ``"mse"`` (default, the choice of Zhang et al.'s code): the Brier score. ``T`` by bounded
      Brent search on ``log T`` in ``bounds``; the weights exactly (a quadratic on the simplex,
      solved face by face in closed form);
    * ``"nll"``: the negative log-likelihood. ``T`` as :class:`~focalcal.posthoc.TemperatureScaling`
      (``criterion="nll"``); the weights by SLSQP on the simplex (convex), in log space.

    **It preserves the argmax**: each component orders the classes as the logits do (or ties
    them all), so the class of the largest logit keeps the largest probability.

    Parameters
    ----------
    loss : {"mse", "nll"}
    bounds : (float, float)
        Search interval of ``T`` (Zhang et al. use ``(0.05, 5)``; the default is wider).

    Attributes
    ----------
    temperature_ : float
    weights_ : tuple of float
        ``(w_0, w_1, w_2)``: TS, uncalibrated, uniform.
    n_classes_ : int

    Examples
    --------
    >>> import torch
    >>> from focalcal.posthoc import EnsembleTemperatureScaling
    >>> g = torch.Generator().manual_seed(0)
    >>> z = 2 * torch.randn(2000, 3, generator=g, dtype=torch.float64)
    >>> labels = torch.multinomial(0.7 * torch.softmax(z, 1) + 0.1, 1, generator=g).squeeze(1)
    >>> ets = EnsembleTemperatureScaling().fit(3 * z, labels)  # over-confident, plus 30 % noise
    >>> round(ets.temperature_, 2), [round(w, 2) for w in ets.weights_]
    (5.76, [0.55, 0.23, 0.22])
    >>> bool((ets.predict_proba(3 * z).argmax(1) == z.argmax(1)).all())
    True
    """

    _fitted_names = ("temperature_", "weights_", "n_classes_")

    def __init__(self, loss: str = "mse", *, bounds: tuple[float, float] = (1e-2, 1e2)) -> None:
        super().__init__()
        self.loss, self.bounds = loss, bounds
        self._validate_params()

    def _validate_params(self) -> None:
        check_choice(self.loss, "loss", ETS_LOSSES)
        self._bounds = _cal.check_bounds(self.bounds)

    def extra_repr(self) -> str:
        s = f"loss={self.loss!r}"
        if getattr(self, "_is_fitted", False):
            s += f", temperature_={self.temperature_:.6g}, weights_={tuple(round(w, 4) for w in self.weights_)}"
        return s

    def fit(self, logits: ArrayLike, labels: ArrayLike) -> EnsembleTemperatureScaling:
        """Fit ``T`` and then the weights on ``logits`` ``(N, K)`` and ``labels`` ``(N,)``; return ``self``."""
        z, y = _cal.check_fit_args(logits, labels, "EnsembleTemperatureScaling.fit")
        k = z.shape[1]
        if self.loss == "nll":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", _cal.SearchRangeWarning)
                t = TemperatureScaling(bounds=self._bounds).fit(z, y).temperature_
        else:
            t = self._brier_temperature(z, y)
        _cal.warn_at_edge("EnsembleTemperatureScaling.fit", "temperature", t, *self._bounds, "bounds",
                          "a pair (T_min, T_max)")
        lp0, lp1 = torch.log_softmax(z / t, -1), torch.log_softmax(z, -1)
        if self.loss == "nll":
            w = self._nll_weights(lp0, lp1, y, k)
        else:
            w = self._brier_weights(lp0.exp(), lp1.exp(), y, k)
        self.temperature_ = float(t)
        self.weights_ = tuple(float(v) for v in w)
        self.n_classes_ = int(k)
        self._is_fitted = True
        return self

    @staticmethod
    def _brier(z: torch.Tensor, y: torch.Tensor, t: float) -> float:
        p = torch.softmax(z / t, -1)
        return float(((p ** 2).sum(-1) - 2 * p.gather(-1, y.view(-1, 1)).squeeze(-1)).mean()) + 1.0

    def _brier_temperature(self, z: torch.Tensor, y: torch.Tensor) -> float:
        """Brier-optimal ``T``: a log-spaced scan of ``bounds``, refined by bounded Brent search."""
        lo, hi = self._bounds
        taus = np.linspace(math.log(lo), math.log(hi), 61)
        scores = [self._brier(z, y, math.exp(u)) for u in taus]
        i = int(np.argmin(scores))
        a, b = taus[max(i - 1, 0)], taus[min(i + 1, len(taus) - 1)]
        res = minimize_scalar(lambda u: self._brier(z, y, math.exp(u)), bounds=(a, b), method="bounded",
                              options={"xatol": 1e-10})
        return math.exp(float(res.x)) if float(res.fun) <= scores[i] else math.exp(float(taus[i]))

    @staticmethod
    def _brier_weights(p0: torch.Tensor, p1: torch.Tensor, y: torch.Tensor, k: int) -> np.ndarray:
        """Minimise ``w^T A w - 2 c^T w`` (the Brier score up to a constant) on the simplex, exactly."""
        idx = y.view(-1, 1)
        a01 = float((p0 * p1).sum(-1).mean())
        a = np.array([[float((p0 ** 2).sum(-1).mean()), a01, 1.0 / k],
                      [a01, float((p1 ** 2).sum(-1).mean()), 1.0 / k],
                      [1.0 / k, 1.0 / k, 1.0 / k]])
        c = np.array([float(p0.gather(-1, idx).mean()), float(p1.gather(-1, idx).mean()), 1.0 / k])
        best, best_w = math.inf, None
        # the minimiser lies in the relative interior of one face: for each face (subset S of the
        # weights), minimise on the affine hull {w_S . 1 = 1} by its KKT system; keep feasible ones
        for face in ((0,), (1,), (2,), (0, 1), (0, 2), (1, 2), (0, 1, 2)):
            s = list(face)
            m = len(s)
            kkt = np.zeros((m + 1, m + 1))
            kkt[:m, :m] = 2 * a[np.ix_(s, s)]
            kkt[:m, m] = kkt[m, :m] = 1.0
            rhs = np.concatenate([2 * c[s], [1.0]])
            sol = np.linalg.lstsq(kkt, rhs, rcond=None)[0]
            if (sol[:m] < -1e-12).any():
                continue
            w = np.zeros(3)
            w[s] = np.clip(sol[:m], 0.0, None)
            w /= w.sum()
            f = float(w @ a @ w - 2 * c @ w)
            if f < best - 1e-15:
                best, best_w = f, w
        return best_w

    @staticmethod
    def _nll_weights(lp0: torch.Tensor, lp1: torch.Tensor, y: torch.Tensor, k: int) -> np.ndarray:
        """Minimise ``-mean log(w . q)`` over the simplex, ``q`` the three true-class probabilities."""
        idx = y.view(-1, 1)
        lq = torch.stack([lp0.gather(-1, idx).squeeze(-1), lp1.gather(-1, idx).squeeze(-1),
                          torch.full_like(lp0[:, 0], -math.log(k))], dim=1).cpu().numpy()

        def fun(w: np.ndarray) -> tuple[float, np.ndarray]:
            with np.errstate(divide="ignore"):
                lw = np.log(np.clip(w, 0.0, None))
            s = lq + lw
            top = s.max(1, keepdims=True)
            lse = top[:, 0] + np.log(np.exp(s - top).sum(1))
            grad = -np.exp(lq - lse[:, None]).mean(0)
            return float(-lse.mean()), grad

        res = minimize(fun, np.array([1.0, 0.0, 0.0]), jac=True, method="SLSQP", bounds=[(0.0, 1.0)] * 3,
                       constraints={"type": "eq", "fun": lambda w: w.sum() - 1.0, "jac": lambda w: np.ones(3)},
                       options={"ftol": 1e-14, "maxiter": 200})
        w = np.clip(res.x, 0.0, None)
        return w / w.sum()

    def forward(self, logits: ArrayLike) -> torch.Tensor:
        """Log-probabilities ``log(w_0 softmax(z / T) + w_1 softmax(z) + w_2 / K)``, in log space."""
        self._require_fitted()
        z = self._check_predict_logits(logits)
        x = z.to(torch.float64)
        k = x.shape[-1]
        lw = [math.log(w) if w > 0 else -math.inf for w in self.weights_]
        parts = torch.stack([lw[0] + torch.log_softmax(x / self.temperature_, -1),
                             lw[1] + torch.log_softmax(x, -1),
                             torch.full_like(x, lw[2] - math.log(k))], dim=0)
        return torch.logsumexp(parts, dim=0).to(z.dtype)

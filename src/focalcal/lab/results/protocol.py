"""The post-hoc calibration protocol of every run (Komisarenko & Kull 2024, Sec. 5.1).

Every calibrator is fitted on the validation logits and evaluated on the test logits.
Temperatures come from one grid (default ``0.01, 0.02, ..., 5``, :func:`temperature_grid`) and
``gamma_ev`` from :data:`focalcal.posthoc.KK_GAMMAS`. K&K choose the parameters separately per
reported metric: by validation log-loss for the log-loss column and by validation ECE (15
equal-mass bins) for the ECE column, for plain TS (``T`` only) and focal TS (``gamma_ev`` and
``T`` jointly) alike: hence the methods of :data:`METHODS`, and "Psi" (Charoenphakdee et al.
2021, Thm. 11), which inverts the focal loss's link and so has a ``gamma`` only for a model
trained with the plain focal loss (:func:`training_gamma`; for every other loss it is the
identity and equals "uncalibrated").

Each row (:func:`calibrate`) reports, on the test set, the metrics of :data:`METRICS`
(:func:`metric_row`: ``ece_mass`` is K&K's ECE, ``ece_width`` Mukhoti's, both 15 bins), the
selected ``temperature`` and ``gamma_ev``, ``at_edge`` (``""``, or which of them stopped at the
edge of its grid, :func:`fit_noting_edges`), the ``criterion`` and its validation value
(``val_score``), the set sizes (``n_val``, ``n_test``) and the temperature grid
(``n_temperatures`` values from ``t_min`` to ``t_max``). All metrics are fractions.
"""


from __future__ import annotations

import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from ... import maps, metrics
from ..._validation import check_int, check_labels, check_logits, check_positive
from ...posthoc import KK_GAMMAS, FocalTemperatureScaling, PsiCorrection, SearchRangeWarning, TemperatureScaling

__all__ = ["METHODS", "FAMILIES", "METRICS", "Calibration", "training_gamma", "temperature_grid",
           "metric_row", "confidence_row", "calibrate", "apply_calibration", "fit_on_grid",
           "fit_noting_edges"]

#: the post-hoc methods of :func:`calibrate`, in the order of their rows: "uncalibrated"
#: (``softmax(z)``), "TS (NLL)" and "TS (ECE)" (``T`` minimising the validation NLL or 15-bin
#: equal-mass ECE), "focal TS (NLL)" and "focal TS (ECE)" (``(gamma_ev, T)`` likewise) and "Psi"
#: (``Psi^gamma(softmax(z))`` with the training ``gamma``)
METHODS: tuple[str, ...] = ("uncalibrated", "TS (NLL)", "TS (ECE)", "focal TS (NLL)", "focal TS (ECE)",
                            "Psi")
#: method -> family (the key of its book colour, :func:`focalcal.plotting.color`)
FAMILIES: dict[str, str] = {"uncalibrated": "uncalibrated", "TS (NLL)": "TS", "TS (ECE)": "TS",
                            "focal TS (NLL)": "focal TS", "focal TS (ECE)": "focal TS", "Psi": "Psi"}
#: the test-set metrics of every row
METRICS: tuple[str, ...] = ("accuracy", "nll", "ece_mass", "ece_width", "classwise_ece", "brier")


CalibratorT = TypeVar("CalibratorT", TemperatureScaling, FocalTemperatureScaling, PsiCorrection)


def fit_on_grid(calibrator: CalibratorT, logits: torch.Tensor, labels: torch.Tensor) -> CalibratorT:
    """``calibrator.fit(logits, labels)`` without its :class:`~focalcal.posthoc.SearchRangeWarning`.

    The protocols here search the papers' own published grids on purpose: a selection at a grid's
    edge is one of their results (reported in the tables), not a misuse to warn a reader about.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SearchRangeWarning)
        return calibrator.fit(logits, labels)


_EDGE = re.compile(r"the selected (\S+) = (\S+) is at the (lower|upper) edge")


def fit_noting_edges(calibrator: CalibratorT, logits: torch.Tensor, labels: torch.Tensor
                     ) -> tuple[CalibratorT, str]:
    """``calibrator.fit(logits, labels)`` and a note of the selections at the edge of their grid.

    Like :func:`fit_on_grid`, the :class:`~focalcal.posthoc.SearchRangeWarning` is not shown (the
    papers' grids are searched on purpose), but it is kept: the note is ``""`` or e.g.
    ``"gamma_ev=5 (upper edge)"`` (several joined by ``"; "``), for a table to mark rather than hide.
    Other warnings are shown as usual.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        calibrator.fit(logits, labels)
    notes = []
    for w in caught:
        if not issubclass(w.category, SearchRangeWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
            continue
        m = _EDGE.search(str(w.message))
        notes.append(f"{m[1]}={m[2]} ({m[3]} edge)" if m else str(w.message))
    return calibrator, "; ".join(notes)


def training_gamma(loss: str, loss_params: Mapping[str, Any] | None = None) -> float:
    """The ``gamma`` that Psi needs for a model trained with ``loss``: its focal ``gamma`` or 0.

    Charoenphakdee et al.'s (2021) Thm. 11 inverts the link of the focal loss with one fixed
    ``gamma``, so only ``"focal"`` has one here. Sample-dependent (FLSD), epoch-scheduled (FLSc),
    dual, inverse and adaptive focal losses have no single ``gamma`` whose ``Psi`` is the inverse
    of their link; for them, and for every proper loss, the result is ``0.0`` (Psi = identity).

    Raises
    ------
    ValueError
        Unknown ``loss`` (the message lists the valid names) or invalid ``loss_params`` (the
        message of :func:`focalcal.losses.make_loss`).
    """
    from ...losses import LOSSES, FocalLoss, make_loss

    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {', '.join(LOSSES)}; got {loss!r}")
    try:
        fn = make_loss(loss, **dict(loss_params or {}))
    except (TypeError, ValueError) as err:
        raise ValueError(f"loss_params of {loss!r} are invalid: {err}") from err
    # exact type: InverseFocalLoss subclasses FocalLoss but has another link
    return float(fn.gamma) if type(fn) is FocalLoss else 0.0


def temperature_grid(n: int = 500, t_max: float = 5.0) -> tuple[float, ...]:
    """``n`` equally spaced temperatures ``t_max * k / n``, ``k = 1..n``.

    The default is K&K's grid ``0.01, 0.02, ..., 5.00`` (:data:`focalcal.posthoc.KK_TEMPERATURES`,
    the same floats); smaller ``n`` gives a coarser grid for quick runs.
    """
    n = check_int(n, "n")
    t_max = check_positive(t_max, "t_max")
    # rounded to 12 digits: the nearest floats to the decimal grid, as k / 100 gives them
    return tuple(round(t_max * k / n, 12) for k in range(1, n + 1))


def metric_row(log_probs: Any, labels: Any, *, n_bins: int = 15) -> dict[str, float]:
    """The test metrics of one method (:data:`METRICS`) from its log-probabilities.

    Parameters
    ----------
    log_probs : Tensor, shape (N, K)
        Log-probabilities (any logits whose softmax is the prediction work as well).
    labels : Tensor, shape (N,)
    n_bins : int
        Bins of the three calibration errors.
    """
    z = check_logits(log_probs, "log_probs")
    if z.dim() != 2:
        raise ValueError(f"log_probs must have shape (N, K), got {tuple(z.shape)}")
    y = check_labels(labels, z.shape[1], z.shape[0])
    return {
        "accuracy": float(metrics.accuracy(logits=z, labels=y)),
        "nll": float(metrics.nll(logits=z, labels=y)),
        "ece_mass": float(metrics.ece(logits=z, labels=y, n_bins=n_bins, binning="mass")),
        "ece_width": float(metrics.ece(logits=z, labels=y, n_bins=n_bins, binning="width")),
        "classwise_ece": float(metrics.classwise_ece(logits=z, labels=y, n_bins=n_bins)),
        "brier": float(metrics.brier(logits=z, labels=y)),
    }


def confidence_row(logits: Any, labels: Any) -> dict[str, float]:
    """How confident and how calibrated one model's predictions are, before any calibrator.

    Parameters
    ----------
    logits : Tensor, shape (N, K)
    labels : Tensor, shape (N,)

    Returns
    -------
    dict
        ``accuracy``, ``confidence`` (mean top-class probability; below the accuracy:
        under-confident), ``ece_width`` and ``ece_mass`` (15 equal-width / equal-mass bins) and
        ``nll`` (nats); fractions, not percentages.
    """
    z = check_logits(logits, "logits")
    if z.dim() != 2:
        raise ValueError(f"logits must have shape (N, K), got {tuple(z.shape)}")
    row = metric_row(z, labels)
    confidence = float(torch.softmax(z, dim=-1).amax(-1).mean())
    return {"accuracy": row["accuracy"], "confidence": confidence, "ece_width": row["ece_width"],
            "ece_mass": row["ece_mass"], "nll": row["nll"]}


@dataclass
class Calibration:
    """What :func:`calibrate` returns.

    Attributes
    ----------
    rows : list of dict
        One row per method of :data:`METHODS` (JSON-serialisable; see the module docstring).
    log_probs : dict
        method -> test log-probabilities, shape (N_test, K), float64.
    calibrators : dict
        method -> the fitted :mod:`focalcal.posthoc` calibrator (``None`` for "uncalibrated").
    """

    rows: list[dict[str, Any]]
    log_probs: dict[str, torch.Tensor]
    calibrators: dict[str, Any]

    def frame(self):
        """The rows as a :class:`pandas.DataFrame` indexed by method."""
        import pandas as pd
        return pd.DataFrame(self.rows).set_index("method")


def calibrate(val_logits: Any, val_labels: Any, test_logits: Any, test_labels: Any, *,
              train_gamma: float = 0.0, temperatures: Sequence[float] | None = None,
              gammas: Sequence[float] = KK_GAMMAS, n_bins: int = 15) -> Calibration:
    """Fit every method of :data:`METHODS` on the validation logits and evaluate it on the test logits.

    Parameters
    ----------
    val_logits : Tensor, shape (N_val, K)
    val_labels : Tensor, shape (N_val,)
    test_logits : Tensor, shape (N_test, K)
    test_labels : Tensor, shape (N_test,)
    train_gamma : float
        ``gamma >= 0`` of Psi (:func:`training_gamma`); 0 makes Psi the identity.
    temperatures : sequence of float, optional
        The temperature grid of TS and focal TS (default :func:`temperature_grid` ``()``, K&K's).
    gammas : sequence of float
        The ``gamma_ev`` grid of focal TS (default K&K's).
    n_bins : int
        Bins of the ECE criterion and of the reported calibration errors.

    Returns
    -------
    Calibration
        Logits are evaluated in float64; the selected parameters are those of the
        calibrators (ties broken as :mod:`focalcal.posthoc` documents).
    """
    zv = check_logits(val_logits, "val_logits").to(torch.float64)
    zt = check_logits(test_logits, "test_logits").to(torch.float64)
    if zv.dim() != 2 or zt.dim() != 2 or zv.shape[1] != zt.shape[1]:
        raise ValueError(f"val_logits and test_logits must have shapes (N_val, K) and (N_test, K) "
                         f"with the same K, got {tuple(zv.shape)} and {tuple(zt.shape)}")
    yv = check_labels(val_labels, zv.shape[1], zv.shape[0], name="val_labels")
    yt = check_labels(test_labels, zt.shape[1], zt.shape[0], name="test_labels")
    temps = temperature_grid() if temperatures is None else tuple(temperatures)
    n_bins = check_int(n_bins, "n_bins")
    fitted: dict[str, Any] = {
        "uncalibrated": None,
        "TS (NLL)": TemperatureScaling("nll", grid=temps, n_bins=n_bins),
        "TS (ECE)": TemperatureScaling("ece_mass", grid=temps, n_bins=n_bins),
        "focal TS (NLL)": FocalTemperatureScaling(gammas, temps, criterion="nll", n_bins=n_bins),
        "focal TS (ECE)": FocalTemperatureScaling(gammas, temps, criterion="ece_mass", n_bins=n_bins),
        "Psi": PsiCorrection(train_gamma),
    }
    criteria = {"TS (NLL)": "nll", "TS (ECE)": "ece_mass", "focal TS (NLL)": "nll",
                "focal TS (ECE)": "ece_mass"}
    rows, log_probs = [], {}
    for method, cal in fitted.items():
        if cal is None:
            lp, t, g, score, at_edge = torch.log_softmax(zt, dim=-1), 1.0, 0.0, None, ""
        else:
            _, at_edge = fit_noting_edges(cal, zv, yv)
            lp = cal(zt)
            t = float(getattr(cal, "temperature_", 1.0))  # Psi has no temperature: T = 1
            if isinstance(cal, FocalTemperatureScaling):
                g = cal.gamma_ev_
            elif isinstance(cal, PsiCorrection):
                g = cal.gamma
            else:
                g = 0.0
            score = getattr(cal, "best_score_", None)
        log_probs[method] = lp
        rows.append({"method": method, "family": FAMILIES[method], "criterion": criteria.get(method),
                     "temperature": t, "gamma_ev": g, "at_edge": at_edge,
                     "val_score": None if score is None else float(score),
                     **metric_row(lp, yt, n_bins=n_bins),
                     "n_val": int(zv.shape[0]), "n_test": int(zt.shape[0]),
                     "n_temperatures": len(temps), "t_min": float(min(temps)),
                     "t_max": float(max(temps))})
    return Calibration(rows, log_probs, fitted)


def apply_calibration(row: Mapping[str, Any], logits: Any) -> torch.Tensor:
    """Test log-probabilities of a calibration row (from ``calibration.json`` or results.csv).

    Every method of :data:`METHODS` is ``log focal_map(softmax(z / T), gamma)`` with the row's
    ``temperature`` and ``gamma_ev`` (TS: ``gamma = 0``; Psi: ``T = 1``; uncalibrated: both
    trivial), so a stored row reproduces its predictions without refitting.

    Parameters
    ----------
    row : mapping with ``temperature`` and ``gamma_ev``
    logits : Tensor, shape (..., K)

    Returns
    -------
    Tensor, shape (..., K), float64
    """
    z = check_logits(logits, "logits").to(torch.float64)
    t, g = float(row["temperature"]), float(row["gamma_ev"])
    if g == 0.0:
        return torch.log_softmax(z / t, dim=-1)
    return maps.log_focal_map_from_logits(z, g, t)


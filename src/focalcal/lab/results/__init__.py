r"""Experiment results: reading a sweep, the post-hoc calibration protocol, tables and figures.

The sweep (:mod:`focalcal.lab.sweep`) executes two papermill templates per run; this package holds
everything they and the book's chapters share, so that the notebooks stay thin. Every public name
is importable from here (``from focalcal.lab import results``); the modules, one job each:

===============  =======================================================================================
``runs``         reading run folders, ``results.csv``, ``profile.json`` and training histories;
                 :func:`runs_dir`, the sweep folder a page reads (``$FOCALCAL_RUNS``, else
                 ``./runs/cpu``); :func:`runs_for`, the runs of one role (what a page selects)
``protocol``     the calibration protocol below: :func:`calibrate`, :func:`apply_calibration`,
                 :func:`metric_row`, :func:`temperature_grid`, :func:`training_gamma`; and
                 :func:`confidence_row`, a model's calibration before any calibrator
``tables``       pandas tables: the runs read, Table 1, comparisons, NLL overfitting, and
                 :func:`styled` (a table formatted for a reader)
``synthetic``    synthetic tasks: test sets drawn again with their true posterior, and the KL
                 divergence of every calibrator to it
``figures``      the experiment chapters' figures
``released``     the papers' protocols on the released networks (:data:`focalcal.lab.data.RELEASED`):
                 Mukhoti et al.'s tables, Komisarenko & Kull's focal TS against TS, Zhou et al.'s
                 post-hoc quantities; one cached row per network (``from focalcal.lab.results import released``)
``bootstrap``    the paired bootstrap over test samples of a difference of two calibrators' ECE
``calibrators``  every post-hoc calibrator on one network, ranked over networks: mean ranks,
                 Friedman and Nemenyi, paired bootstrap against TS (NLL), a per-network cache
                 (``from focalcal.lab.results import calibrators``)
===============  =======================================================================================

A run folder is written by the ``train_classifier`` template (through
:class:`focalcal.lab.train.Trainer`) and by ``posthoc_calibration``; its files and their formats
belong to :mod:`focalcal.lab.runfolder`, which also reads them (:func:`load_run`).

Post-hoc protocol (Komisarenko & Kull 2024, Sec. 5.1)
-----------------------------------------------------
Every calibrator is fitted on the validation logits and evaluated on the test logits.
Temperatures come from one grid (default ``0.01, 0.02, ..., 5``, :func:`temperature_grid`) and
``gamma_ev`` from :data:`focalcal.posthoc.KK_GAMMAS`. K&K choose the parameters separately per
reported metric: by validation log-loss for the log-loss column and by validation ECE (15
equal-mass bins) for the ECE column, for plain TS (``T`` only) and focal TS (``gamma_ev`` and
``T`` jointly) alike. Hence the methods of :data:`METHODS`:

================  ===================================================================  ==========
method            fitted on the validation set                                         family
================  ===================================================================  ==========
uncalibrated      nothing: ``softmax(z)``                                              uncalibrated
TS (NLL)          ``T`` on the grid minimising the NLL                                 TS
TS (ECE)          ``T`` on the grid minimising the 15-bin equal-mass ECE               TS
focal TS (NLL)    ``(gamma_ev, T)`` on the grid minimising the NLL                     focal TS
focal TS (ECE)    ``(gamma_ev, T)`` on the grid minimising the equal-mass ECE          focal TS
Psi               nothing: ``Psi^gamma(softmax(z))`` with the training ``gamma``       Psi
================  ===================================================================  ==========

Psi (Charoenphakdee et al. 2021, Thm. 11) inverts the focal loss's link, so it has a ``gamma``
only for a model trained with the plain focal loss (:func:`training_gamma`); for every other loss
it is the identity (``gamma = 0``) and equals "uncalibrated".

Each row reports, on the test set: ``accuracy``, ``nll`` (nats), ``ece_mass`` (15 equal-mass
bins, K&K's ECE), ``ece_width`` (15 equal-width bins, Mukhoti's ECE), ``classwise_ece`` (15
equal-width bins per class), ``brier``; plus the selected ``temperature`` and ``gamma_ev``,
``at_edge`` (``""``, or which of them stopped at the edge of its grid, e.g.
``"gamma_ev=5 (upper edge)"``: ``focalcal.lab.results.protocol.fit_noting_edges``), the
``criterion``, the criterion's value on the validation set (``val_score``), the set sizes
(``n_val``, ``n_test``) and the temperature grid (``n_temperatures`` values from ``t_min`` to
``t_max``). All metrics are fractions (not percentages).
"""

from . import bootstrap, released
from .figures import plot_posterior_1d, plot_posterior_kl, plot_reliability_panel, plot_training_curves
from .protocol import (FAMILIES, METHODS, METRICS, Calibration, apply_calibration, calibrate,
                       confidence_row, metric_row, temperature_grid, training_gamma)
from .runs import (RUNS_ENV, Run, load_histories, load_profile, load_results, load_run, runs_dir, runs_for,
                   test_set)
from .synthetic import SyntheticTestSet, focal_loss_rows, kl_by_method, posterior_kl, synthetic_test_set
from .tables import (RUN_COLUMNS, TABLE1_CALIBRATIONS, compare_calibrations, describe_runs, format_table1,
                     nll_overfitting, overfitting_by_loss, representative_runs, select_losses, selection_gain,
                     styled, table1)

__all__ = [
    # runs
    "RUNS_ENV", "runs_dir", "Run", "load_run", "load_results", "load_profile", "runs_for", "load_histories",
    "test_set",
    # protocol
    "METHODS", "FAMILIES", "METRICS", "Calibration", "training_gamma", "temperature_grid", "metric_row",
    "confidence_row", "calibrate", "apply_calibration",
    # tables
    "TABLE1_CALIBRATIONS", "RUN_COLUMNS", "describe_runs", "select_losses", "table1", "format_table1",
    "compare_calibrations", "selection_gain", "representative_runs", "nll_overfitting", "overfitting_by_loss", "styled",
    # synthetic tasks
    "SyntheticTestSet", "synthetic_test_set", "posterior_kl", "kl_by_method", "focal_loss_rows",
    # figures
    "plot_training_curves", "plot_reliability_panel", "plot_posterior_1d", "plot_posterior_kl",
]

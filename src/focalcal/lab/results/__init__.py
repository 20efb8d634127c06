r"""Experiment results: reading a sweep, the post-hoc calibration protocol, tables and figures.

What the sweep's two templates and the book's chapters share, so that the notebooks stay thin;
every public name is importable from here. The modules, one job each:

===============  =======================================================================================
``runs``         reading run folders, ``results.csv``, ``profile.json`` and training histories;
                 :func:`runs_dir`, the sweep folder a page reads (``$FOCALCAL_RUNS``, else
                 ``./runs/cpu``); :func:`runs_for`, the runs of one role (what a page selects)
``protocol``     the calibration protocol: :func:`calibrate`, :func:`apply_calibration`,
                 :func:`metric_row`, :func:`temperature_grid`, :func:`training_gamma`; and
                 :func:`confidence_row`, a model's calibration before any calibrator
``tables``       pandas tables (the runs read, Table 1, comparisons) and :func:`styled`
``synthetic``    synthetic tasks' test sets with their true posterior, and each calibrator's KL to it
``figures``      the experiment chapters' figures
``released``     the papers' protocols on the released networks (:data:`focalcal.lab.data.RELEASED`):
                 Mukhoti et al.'s tables, Komisarenko & Kull's focal TS against TS, Zhou et al.'s
                 post-hoc quantities; one cached row per network (``from focalcal.lab.results import released``)
``bootstrap``    the paired bootstrap over test samples of a difference of two calibrators' ECE
``calibrators``  every post-hoc calibrator on one network, ranked over networks: mean ranks,
                 Friedman and Nemenyi, paired bootstrap against TS (NLL), a per-network cache
                 (``from focalcal.lab.results import calibrators``)
===============  =======================================================================================

Run folders are :mod:`focalcal.lab.runfolder`'s; the post-hoc protocol is described in ``protocol``.
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

"""Issue 21, items 1-3 and 6: the library with the inputs a practitioner has.

Probabilities in any precision (one tolerance rule), misuse warnings in every metric, 1-D binary
scores, and one rule per check (gamma, labels), each driven as a user would.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import focalcal.metrics as M
from focalcal.losses import focal_loss
from focalcal.maps import focal_map, focal_map_from_logits, inverse_focal_map
from focalcal.posthoc import TemperatureScaling


@pytest.fixture(scope="module")
def task():
    g = torch.Generator().manual_seed(0)
    z = 3 * torch.randn(2000, 10, generator=g)
    y = torch.multinomial(torch.softmax(z / 2, 1), 1, generator=g).squeeze(1)
    return z, y


PROB_METRICS = [M.ece, M.mce, M.classwise_ece, M.nll, M.brier, M.accuracy, M.aurc, M.eaurc]


# ---- item 1: the metrics take the library's own half-precision output ----------------------

@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_metrics_take_half_precision_calibrator_and_map_output(task, dtype):
    z, y = task
    ts = TemperatureScaling().fit(z, y)
    exact = ts.predict_proba(z.double())
    for probs in (ts.predict_proba(z.to(dtype)), focal_map_from_logits(z.to(dtype), gamma=3.0),
                  torch.softmax(z.to(dtype), 1)):
        assert probs.dtype == dtype
        for fn in PROB_METRICS:
            assert np.isfinite(fn(probs, y))
    # rounding to half precision moves the metrics by rounding only
    half = ts.predict_proba(z.to(dtype))
    assert M.ece(half, y) == pytest.approx(M.ece(exact, y), abs=0.02)
    assert M.nll(half, y) == pytest.approx(M.nll(exact, y), abs=0.02)
    assert M.brier(half, y) == pytest.approx(M.brier(exact, y), abs=0.02)


# ---- item 2: float32 probabilities cast to float64 (or to numpy / lists) ------------------

def test_float32_probabilities_in_any_container_are_accepted(task):
    z, y = task
    p = torch.softmax(z, 1)
    want = M.ece(p, y)
    for cast in (p.double(), np.asarray(p, dtype=np.float64), np.array(p.tolist()), p.tolist(),
                 p.numpy()):
        assert M.ece(cast, y) == pytest.approx(want, abs=1e-6)
        assert np.isfinite(M.nll(cast, y)) and np.isfinite(M.brier(cast, y))
    assert M.kl_to_posterior(p.double(), torch.softmax(z / 2, 1).double()) > 0
    assert M.kl_to_posterior(p.half(), true_probs=torch.softmax(z / 2, 1).bfloat16()) > 0
    # the maps that take probabilities follow the same rule
    assert torch.isfinite(focal_map(p.double(), 3.0)).all()
    assert torch.isfinite(focal_map(p.bfloat16(), 3.0).float()).all()
    assert torch.isfinite(inverse_focal_map(p.double(), 3.0)).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_rows_that_are_not_distributions_are_still_refused(task, dtype):
    z, y = task
    p = torch.softmax(z, 1).to(dtype)
    halves = (p.double() * 0.5).to(dtype)  # rows summing to 0.5
    doubled = torch.tensor([[1.0, 1.0]] * 4, dtype=dtype)  # entries in [0, 1], rows summing to 2
    for bad, labels in ((halves, y), (doubled, torch.tensor([0, 1, 1, 0]))):
        for fn in PROB_METRICS:
            with pytest.raises(ValueError, match="rows of probs must sum to 1"):
                fn(bad, labels)
        with pytest.raises(ValueError, match="rows of probs must sum to 1"):
            focal_map(bad, 3.0)
        with pytest.raises(ValueError, match="rows of p must sum to 1"):
            inverse_focal_map(bad, 3.0)
        with pytest.raises(ValueError, match="rows of true_probs must sum to 1"):
            M.kl_to_posterior(p, true_probs=bad if bad.shape == p.shape else halves)
    negative = p.clone()
    negative[:, 0] -= 0.01
    negative[:, 1] += 0.01
    with pytest.raises(ValueError, match=r"probs must lie in \[0, 1\]"):
        M.ece(negative, y)


def test_the_tolerance_rule():
    """(2 + log2 K) ulps of bfloat16 at 1: below 0.5 for any practical K, above half-precision rounding."""
    from focalcal._validation import prob_row_tolerance

    assert prob_row_tolerance(2) == pytest.approx(3 * 2**-7)
    assert prob_row_tolerance(1000) < 0.1 and prob_row_tolerance(10**6) < 0.5
    assert prob_row_tolerance(2) > 2**-7  # the bf16 deviation of the issue (0.00781) passes


# ---- item 3: misuse warnings and 1-D binary scores --------------------------------------------

LOGIT_METRICS = PROB_METRICS


@pytest.mark.parametrize("fn", LOGIT_METRICS, ids=lambda f: f.__name__)
def test_probabilities_passed_as_logits_warn_in_every_metric(task, fn):
    z, y = task
    p = torch.softmax(z, 1)
    with pytest.warns(UserWarning, match=rf"^{fn.__name__}: the logits passed look like probabilities") as rec:
        fn(logits=p, labels=y)
    assert rec[0].filename == __file__  # points at the user's line, not the library's
    for probs in (p.half(), p.double()):
        with pytest.warns(UserWarning, match="look like probabilities"):
            fn(logits=probs, labels=y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fn(logits=z, labels=y)  # real logits: no warning
        fn(logits=p.log(), labels=y)  # log-probabilities: the documented way


def test_probabilities_passed_as_logits_warn_in_the_batched_metrics_and_kl(task):
    z, y = task
    p = torch.softmax(z, 1)
    with pytest.warns(UserWarning, match="look like probabilities"):
        M.batched.ece(logits=torch.stack([p, p]), labels=y)
    with pytest.warns(UserWarning, match="look like probabilities"):
        M.kl_to_posterior(logits=p, true_probs=p)
    with pytest.warns(UserWarning, match="look like probabilities"):
        M.confidence_score(logits=p)


def test_one_dimensional_binary_scores_get_the_two_column_form():
    p1 = torch.tensor([0.9, 0.2, 0.6, 0.3])
    y = torch.tensor([1, 0, 1, 1])
    for fn in PROB_METRICS:
        with pytest.raises(ValueError, match=r"probs must have shape \(\.\.\., N, K\).*"
                                             r"torch\.stack\(\[1 - p, p\], dim=-1\)"):
            fn(p1, y)
        with pytest.raises(ValueError, match=r"logits must have shape \(\.\.\., N, K\).*"
                                             r"torch\.stack\(\[torch\.zeros_like\(z\), z\], dim=-1\)"):
            fn(logits=torch.logit(p1), labels=y)
    # the form the message gives works, and matches the logit form
    two = torch.stack([1 - p1, p1], dim=-1)
    z1 = torch.logit(p1)
    assert M.nll(two, y) == pytest.approx(M.nll(logits=torch.stack([torch.zeros_like(z1), z1], -1),
                                                labels=y), rel=1e-6)


# ---- item 6: one rule per check ---------------------------------------------------------------

def test_gamma_must_be_a_real_number(task):
    z, y = task
    for bad in ("3", "3.0", None, True, [3.0]):
        with pytest.raises(TypeError, match="gamma must be a real number"):
            focal_loss(z, y, gamma=bad)
        with pytest.raises(TypeError, match="gamma must be a real number"):
            focal_map_from_logits(z, gamma=bad)
    with pytest.raises(TypeError, match="gamma"):
        TemperatureScaling("focal", gamma="2")
    # ordinary numbers are never refused
    want = focal_loss(z, y, gamma=3.0)
    for ok in (3, np.float32(3.0), np.int64(3), torch.tensor(3.0), np.array(3.0)):
        assert torch.allclose(focal_loss(z, y, gamma=ok), want)


def test_labels_are_integer_class_indices_with_one_message_everywhere(task):
    z, y = task
    message = r"^labels must hold integer class indices \(an integer dtype\), got dtype"
    for bad in (y.float(), y.double(), y.numpy().astype(np.float64), y.float().tolist(), y.bool()):
        with pytest.raises(ValueError, match=message):
            TemperatureScaling().fit(z, bad)
        with pytest.raises(ValueError, match=message):
            M.ece(logits=z, labels=bad)
        with pytest.raises(ValueError, match=message):
            focal_loss(z, bad, gamma=3.0)
    for ok in (y.int(), y.numpy(), y.tolist(), y.numpy().astype(np.uint8)):
        assert TemperatureScaling().fit(z, ok).temperature_ > 0
        assert 0 <= M.ece(logits=z, labels=ok) <= 1

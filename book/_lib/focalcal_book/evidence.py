"""Float64 evidence that the theory chapters assert on, beside their symbolic checks.

A chapter proves a statement (or checks it at high precision) and then confirms it, or the
library's implementation of it, on many random or gridded inputs. The loops that produce those
numbers live here, so that the chapter's cell shows the call and the assertion:

- :func:`eq4_slack`: Mukhoti's Eq. (4) slack ``L_f - (KL - gamma H[p])`` on pairs of distributions;
- :func:`linear_layer_gradient_error`: Mukhoti's Prop. 1 through a linear layer, with autograd;
- :func:`order_preservation`, :func:`confidence_regions`, :func:`max_overconfidence`,
  :func:`recovery` and :func:`argmax_preserved`: Charoenphakdee's Thm. 3, Thm. 8, footnote 2,
  Thm. 11 and Prop. 12 on random and structured posteriors.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from focalcal import maps
from focalcal_book import posterior


def _entropy(d: torch.Tensor) -> torch.Tensor:
    return torch.special.entr(d).sum(-1)


def eq4_slack(p_hat: torch.Tensor, q: torch.Tensor, gammas: Sequence[float]) -> torch.Tensor:
    """``L_f(p_hat; q) - (KL(q || p_hat) - gamma H[p_hat])`` for each gamma (rows) and pair
    (columns), with ``L_f`` from :func:`focalcal_book.posterior.focal_risk`."""
    kl = posterior.focal_risk(p_hat, q, 0.0) - _entropy(q)
    return torch.stack([posterior.focal_risk(p_hat, q, g) - (kl - g * _entropy(p_hat))
                        for g in gammas])


def linear_layer_gradient_error(gammas: Sequence[float] = (0.5, 1.0, 3.0, 5.0), *,
                                n: int = 512, n_grad: int = 64, dim: int = 8, k: int = 5,
                                seed: int = 0) -> tuple[float, int]:
    """Largest relative difference between the per-sample autograd gradients
    ``dL_f/dW`` and ``g(p_y, gamma) dL_c/dW`` of a random linear layer ``softmax(x W^T)``, and
    the number of gradients compared (``n_grad`` per gamma)."""
    gen = torch.Generator().manual_seed(seed)
    feats = torch.randn(n, dim, generator=gen, dtype=torch.float64)
    labels = torch.randint(0, k, (n,), generator=gen)
    weight0 = torch.randn(k, dim, generator=gen, dtype=torch.float64) * 1.5
    max_rel, count = 0.0, 0
    for g in gammas:
        grads = []
        for gg in (g, 0.0):
            weight = weight0.clone().requires_grad_(True)
            logits = feats @ weight.T
            p_true = torch.softmax(logits, -1).gather(1, labels[:, None]).squeeze(1)
            per_sample = maps.focal_loss_term(p_true, gg)
            grads.append(torch.stack([
                torch.autograd.grad(l_i, weight, retain_graph=True)[0].flatten()
                for l_i in per_sample[:n_grad]]))
        factor = maps.gradient_factor(p_true[:n_grad].detach(), g)
        count += len(factor)
        err = (grads[0] - factor[:, None] * grads[1]).norm(dim=1) / grads[1].norm(dim=1)
        max_rel = max(max_rel, float(err.max()))
    return max_rel, count


# --------------------------------------------------------------------------------------------
# Charoenphakdee et al. (2021)
# --------------------------------------------------------------------------------------------

def order_preservation(cases: Sequence[tuple[int, int]], gammas: Sequence[float]) -> list[dict]:
    """Thm. 3 on random posteriors: for each ``(K, n)`` of ``cases`` (``n`` posteriors drawn with
    ``seed=K``) and each gamma, how many Newton minimisers keep the strict order of their
    posterior, how many posteriors keep the order of their minimiser, and how many argmaxes
    agree."""
    rows = []
    for k, n in cases:
        eta = posterior.sample_simplex(n, k, seed=k)
        for g in gammas:
            q = posterior.focal_risk_minimizer(eta, g)
            rows.append(dict(
                K=k, gamma=g, posteriors=n,
                eta_order_kept=int(posterior.strictly_order_preserving(eta, q).sum()),
                q_order_kept=int(posterior.strictly_order_preserving(q, eta).sum()),
                argmax_equal=int((q.argmax(-1) == eta.argmax(-1)).sum())))
    return rows


def confidence_regions(gammas: Sequence[float], draws: Sequence[torch.Tensor]) -> list[dict]:
    """Thm. 8 parts 2 and 3 on minimisers ``q`` (``draws``) and their posteriors
    ``eta = Psi(q)``: per gamma, the counts of minimisers in the over-confident region
    ``max q <= tau_oc``, the under-confident region ``max q >= tau_uc`` and between them, with
    how many are over- (``gap > 0``) or under-confident (``gap < 0``) in each, and Cor. 9's
    ``max q > 1/2``."""
    rows = []
    for g in gammas:
        toc, tuc = maps.tau_oc(g), maps.tau_uc(g)
        gap = torch.cat([posterior.confidence_gap(q, maps.focal_map(q, g)) for q in draws])
        top = torch.cat([q.amax(-1) for q in draws])
        oc_reg, uc_reg = top <= toc, top >= tuc
        amb = ~oc_reg & ~uc_reg
        rows.append(dict(
            gamma=g, tau_oc=toc, tau_uc=tuc, n_oc_region=int(oc_reg.sum()),
            oc_ok=int((gap[oc_reg] > 0).sum()), n_uc_region=int(uc_reg.sum()),
            uc_ok=int((gap[uc_reg] < 0).sum()), n_ambiguous=int(amb.sum()),
            amb_oc=int((gap[amb] > 0).sum()), amb_uc=int((gap[amb] < 0).sum()),
            top_gt_half_uc=int((gap[top > 0.5] < 0).sum()), n_top_gt_half=int((top > 0.5).sum())))
    return rows


def max_overconfidence(grid: Sequence[tuple[int, Sequence[float]]]) -> list[dict]:
    """Footnote 2: the largest ``max q* - max eta`` found by
    :func:`focalcal_book.posterior.max_eta_overconfidence` for each ``(K, gammas)`` of ``grid``,
    with the minimiser that attains it (rounded to 4 digits)."""
    rows = []
    for k, gammas in grid:
        for g in gammas:
            gap, q_best = posterior.max_eta_overconfidence(k, g)
            rows.append(dict(K=k, gamma=g, max_gap=gap, argmax_q=q_best.numpy().round(4)))
    return rows


def recovery(cases: Sequence[int], gammas: Sequence[float], *, n: int = 400) -> list[dict]:
    """Thm. 11 on random posteriors (``n`` per K, ``seed=110 + K``): the closed-form minimiser
    ``maps.inverse_focal_map`` against the Newton solver, and ``Psi`` of it against the
    posterior."""
    rows = []
    for k in cases:
        eta = posterior.sample_simplex(n, k, seed=110 + k)
        for g in gammas:
            q_cf = maps.inverse_focal_map(eta, g)
            q_nt = posterior.focal_risk_minimizer(eta, g)
            risk_cf = posterior.focal_risk(q_cf, eta, g)
            rows.append(dict(
                K=k, gamma=g, psi_error=float((maps.focal_map(q_cf, g) - eta).abs().max()),
                newton_rel_diff=float(((q_cf - q_nt).abs() / q_nt).max()),
                kkt_spread=float(posterior.stationarity_spread(q_cf, eta, g).max()),
                risk_excess=float((risk_cf - posterior.focal_risk(q_nt, eta, g)).max()),
                beats_eta=bool((risk_cf < posterior.focal_risk(eta, eta, g)).all())))
    return rows


def argmax_preserved(cases: Sequence[tuple[int, int]], gammas: Sequence[float]) -> tuple[bool, int]:
    """Prop. 12: whether ``Psi`` keeps the argmax and the whole order of ``n`` random vectors per
    ``(K, n)`` of ``cases`` (``seed=120 + K``) for every gamma, and how many vectors it saw."""
    ok, count = True, 0
    for k, n in cases:
        v = posterior.sample_simplex(n, k, seed=120 + k)
        for g in gammas:
            psi_v = maps.focal_map(v, g)
            ok &= bool((psi_v.argmax(-1) == v.argmax(-1)).all()
                       and posterior.strictly_order_preserving(v, psi_v).all())
            count += n
    return ok, count


# --------------------------------------------------------------------------------------------
# Komisarenko & Kull (2024)
# --------------------------------------------------------------------------------------------

def closest_binary_ts(gammas, s: torch.Tensor, *, n_scan: int = 16):
    """K&K's Fig. 2: for each gamma, the inverse temperature of the TS map closest to the binary
    focal calibration map in the worst case over the logits ``s`` (searched inside Prop. 3's
    band, widened by 0.05), and that worst-case probability difference; two numpy arrays."""
    import math

    import numpy as np

    from focalcal_book import theory

    z = torch.stack([s, torch.zeros_like(s)], -1)  # two-class logits (s, 0): softmax = (sigma(s), .)
    inv_t, err = [], []
    for gm in gammas:
        fc_p = torch.sigmoid(maps.binary_focal_logit(s, float(gm)))
        lo, hi = gm + 1 - math.log1p(gm) / 2, gm + 1
        b, e = theory.minimax_inverse_temperature(z, torch.stack([fc_p, 1 - fc_p], -1),
                                                  bounds=(lo - 0.05, hi + 0.05), n_scan=n_scan)
        inv_t.append(b)
        err.append(e)
    return np.array(inv_t), np.array(err)


def two_level_drops(ks: Sequence[int], gammas: Sequence[float], *, n: int = 400) -> dict:
    """K&K's Prop. 5 on the two-level family ``q = (a x m, b x (K - m))``: per K, the most
    negative change ``p_hat(q)_1 - q_1`` of the top probability for each gamma (``n`` values of
    ``a`` between ``1/K`` and ``1/m`` for every ``m``)."""
    out = {}
    for k in ks:
        pts = []
        for m in range(1, k):
            a_vals = torch.linspace(1 / k, 1 / m, n + 2, dtype=torch.float64)[1:-1]
            b_vals = (1 - m * a_vals) / (k - m)
            pts.append(torch.cat([a_vals[:, None].expand(-1, m),
                                  b_vals[:, None].expand(-1, k - m)], -1))
        pts = torch.cat(pts)
        out[k] = [float((maps.focal_map(pts, g)[:, 0] - pts[:, 0]).min()) for g in gammas]
    return out


def closest_multiclass_ts(k: int, step: float, gammas, *, spread: float = 10.0,
                          n_scan: int = 24) -> dict:
    """K&K's Figs. 5-7: the minimax inverse temperature of the TS map closest to the K-class
    focal map for each gamma (the adaptive logit grid of
    :func:`focalcal_book.theory.adaptive_minimax_inverse_temperature`, a box of width
    ``spread``), its worst-case error, the
    number of logit vectors and the least-squares line of ``1/T`` against gamma. Asserts that
    ``1/T`` has no kink (a fit in another local minimum would show one)."""
    import numpy as np

    from focalcal_book import theory

    res = [theory.adaptive_minimax_inverse_temperature(
        lambda z, gm=gm: maps.focal_map_from_logits(z, float(gm)), k, spread=spread, step=step,
        bounds=(0.5, gm + 1.5), n_scan=n_scan) for gm in gammas]
    inv_t, err = np.array([r[0] for r in res]), np.array([r[1] for r in res])
    slopes = np.diff(inv_t) / np.diff(gammas)
    assert np.all(slopes > 0) and np.all(np.abs(np.diff(slopes)) < 0.1), (k, inv_t)
    return {"gamma": gammas, "inv_T": inv_t, "err": err, "n_logits": len(res[-1][2]),
            "line": np.polyfit(gammas, inv_t, 1)}

"""Float64 evidence that the theory chapters assert on, beside their symbolic checks.

A chapter proves a statement (or checks it at high precision) and then confirms it, or the
library's implementation of it, on many random or gridded inputs. The loops that produce those
numbers live here, so that the chapter's cell shows the call and the assertion:

- :func:`eq4_slack`: Mukhoti's Eq. (4) slack ``L_f - (KL - gamma H[p])`` on pairs of distributions;
- :func:`linear_layer_gradient_error`: Mukhoti's Prop. 1 through a linear layer, with autograd.
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

"""Synthetic tasks with a known posterior: Gaussian mixtures and their seeded datasets.

Every sample carries its true class posterior ``eta(x) = p(y | x)``
(:attr:`SyntheticDataset.posterior`), so properness is measured directly (e.g.
``metrics.kl_to_posterior``); train, validation and test are independent draws (separate child
seeds of one :class:`numpy.random.SeedSequence`). The registry's two tasks:

``"charoenphakdee_1d"``
    The 1-D 3-class problem of Charoenphakdee et al. (2021), Sec. 5.2 / Fig. 3. The paper gives
    its distribution only as the plot of Fig. 3a; the text states no numbers. We use a
    three-component Gaussian mixture on the real line with equal priors, means ``-2, 0, 2`` and
    unit standard deviations (:func:`charoenphakdee_1d_task`), which has the features the figure
    relies on: the outer classes' posteriors approach 1, the middle class's peaks at 0.79, and
    every class is the Bayes decision somewhere.
``"gaussian_mixture"``
    ``K`` classes in ``d`` dimensions, ``p(x | y=k) = N(mu_k, sigma_k^2 I)``
    (:func:`gaussian_mixture_task`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from ..._validation import as_float_tensor, check_choice, check_finite, check_int, check_positive

__all__ = ["GaussianMixture", "charoenphakdee_1d_task", "gaussian_mixture_task", "SPLITS",
           "SyntheticDataset"]

_LOG_2PI = math.log(2 * math.pi)


class GaussianMixture:
    """A labelled Gaussian mixture: ``p(y=k) = pi_k``, ``p(x | y=k) = N(mu_k, sigma_k^2 I_d)``.

    Parameters
    ----------
    means : array_like, shape (K, d)
        Class means ``mu_k``.
    stds : float or array_like, shape (K,)
        Isotropic standard deviations ``sigma_k > 0``.
    priors : array_like, shape (K,), optional
        Class priors ``pi_k`` (positive, summing to 1); uniform by default.

    Notes
    -----
    All densities are evaluated in log space (``log pi_k - ||x - mu_k||^2 / (2 sigma_k^2) - d log
    sigma_k``, normalised by ``logsumexp``) and in float64 (results are cast back to the dtype of
    ``x``), so the posterior stays finite and exact to rounding for any finite ``x``, including
    ``|x| ~ 1e4`` where every density underflows.
    """

    def __init__(self, means: Any, stds: Any = 1.0, priors: Any = None) -> None:
        mu = as_float_tensor(means, "means").to(torch.float64)
        if mu.dim() != 2 or mu.shape[0] < 2 or mu.shape[1] < 1:
            raise ValueError(f"means must have shape (K, d) with K >= 2 classes, got {tuple(mu.shape)}")
        check_finite(mu, "means")
        k, _ = mu.shape
        s = as_float_tensor(stds, "stds").to(torch.float64)
        s = s.expand(k).clone() if s.dim() == 0 else s
        if s.shape != (k,):
            raise ValueError(f"stds must be a scalar or have shape ({k},), got {tuple(s.shape)}")
        check_finite(s, "stds")
        if bool((s <= 0).any()):
            raise ValueError(f"stds must be positive, got {s.tolist()}")
        if priors is None:
            p = torch.full((k,), 1.0 / k, dtype=torch.float64)
        else:
            p = as_float_tensor(priors, "priors").to(torch.float64)
            if p.shape != (k,):
                raise ValueError(f"priors must have shape ({k},), got {tuple(p.shape)}")
            check_finite(p, "priors")
            if bool((p <= 0).any()) or abs(float(p.sum()) - 1.0) > 1e-8:
                raise ValueError(f"priors must be positive and sum to 1, got {p.tolist()}")
        self.means, self.stds, self.priors = mu, s, p

    @property
    def n_classes(self) -> int:
        return int(self.means.shape[0])

    @property
    def dim(self) -> int:
        return int(self.means.shape[1])

    def _check_x(self, x: Any) -> torch.Tensor:
        t = as_float_tensor(x, "x")
        if t.dim() < 1 or t.shape[-1] != self.dim:
            raise ValueError(f"x must have shape (..., {self.dim}), got {tuple(t.shape)}")
        check_finite(t, "x")
        return t

    def _log_joint64(self, x: Any) -> tuple[torch.Tensor, torch.dtype]:
        t = self._check_x(x)
        # float64 inside whatever the input dtype: for |x| ~ 1e4 the squared distances are ~1e8
        # and their differences (the posterior's log-odds) would lose every digit in float32
        sq = (t.to(torch.float64).unsqueeze(-2) - self.means).pow(2).sum(-1)
        s = self.stds
        return self.priors.log() - 0.5 * sq / s.pow(2) - self.dim * (s.log() + 0.5 * _LOG_2PI), t.dtype

    def log_joint(self, x: Any) -> torch.Tensor:
        """``log p(x, y=k)``, shape ``(..., K)``, in the dtype of ``x`` (float32 or float64)."""
        lj, dtype = self._log_joint64(x)
        return lj.to(dtype)

    def log_density(self, x: Any) -> torch.Tensor:
        """Marginal ``log p(x)``, shape ``(...)``."""
        lj, dtype = self._log_joint64(x)
        return torch.logsumexp(lj, dim=-1).to(dtype)

    def log_posterior(self, x: Any) -> torch.Tensor:
        """``log p(y=k | x)``, shape ``(..., K)``."""
        lj, dtype = self._log_joint64(x)
        return torch.log_softmax(lj, dim=-1).to(dtype)

    def posterior(self, x: Any) -> torch.Tensor:
        """True class posterior ``eta(x) = p(y | x)``, shape ``(..., K)``; rows sum to 1."""
        lj, dtype = self._log_joint64(x)
        return torch.softmax(lj, dim=-1).to(dtype)

    def bayes_logits(self, x: Any) -> torch.Tensor:
        """Logits whose softmax is the true posterior (the joint log-density)."""
        return self.log_joint(x)

    def sample(self, n: int, generator: torch.Generator | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Draw ``n`` labelled samples.

        Returns
        -------
        x : Tensor, shape (n, d), float64
        y : Tensor, shape (n,), int64
        """
        n = check_int(n, "n", minimum=1)
        y = torch.multinomial(self.priors, n, replacement=True, generator=generator)
        noise = torch.randn(n, self.dim, dtype=torch.float64, generator=generator)
        x = self.means[y] + self.stds[y, None] * noise
        return x, y

    def __repr__(self) -> str:
        return (f"GaussianMixture(K={self.n_classes}, d={self.dim}, "
                f"stds={self.stds.tolist()}, priors={self.priors.tolist()})")


def charoenphakdee_1d_task() -> GaussianMixture:
    """The 1-D 3-class task standing in for Charoenphakdee et al. (2021), Fig. 3a.

    The paper shows ``p(x)``, ``p(x, y)`` and ``p(y | x)`` only as plots and states no parameters,
    so this is our documented choice: equal priors, means ``(-2, 0, 2)``, unit standard
    deviations. The outer classes' posteriors tend to 1 in the tails, the middle class peaks at
    ``1 / (1 + 2 e^{-2}) = 0.787`` at ``x = 0``: the regime where the focal-loss minimiser is
    under-confident (Charoenphakdee et al., Thm. 8).
    """
    return GaussianMixture(means=[[-2.0], [0.0], [2.0]], stds=1.0)


def gaussian_mixture_task(n_classes: int = 10, dim: int = 2, separation: float = 2.0,
                          std: float = 1.0, priors: Any = None, seed: int = 0) -> GaussianMixture:
    """A ``K``-class isotropic Gaussian mixture with seeded random means.

    The means are i.i.d. ``N(0, separation^2 I_d)`` draws from ``numpy.random.default_rng(seed)``,
    so the task is a pure function of its arguments; ``separation / std`` sets the Bayes error.
    """
    k = check_int(n_classes, "n_classes", minimum=2)
    d = check_int(dim, "dim", minimum=1)
    sep = check_positive(separation, "separation")
    check_positive(std, "std")
    means = np.random.default_rng(seed).normal(0.0, sep, size=(k, d))
    return GaussianMixture(means=means, stds=std, priors=priors)


SPLITS = ("train", "val", "test")


def _split_generator(seed: int, split: str) -> torch.Generator:
    # independent child streams per split: same seed -> same data, splits never overlap in RNG
    ss = np.random.SeedSequence(entropy=int(seed), spawn_key=(SPLITS.index(split),))
    return torch.Generator().manual_seed(int(ss.generate_state(1, np.uint64)[0] >> np.uint64(1)))


class SyntheticDataset(Dataset):
    """``n`` samples of a synthetic task, each with its true posterior.

    Attributes
    ----------
    x : Tensor, shape (n, d), ``dtype``
    targets : Tensor, shape (n,), int64
    posterior : Tensor, shape (n, K), float64
        ``eta(x_i)``, exact to rounding.
    task : GaussianMixture

    Items are ``(x_i, y_i)``, or ``(x_i, y_i, eta_i)`` with ``return_posterior=True``.
    """

    def __init__(self, task: GaussianMixture, n: int, seed: int = 0, split: str = "train",
                 dtype: torch.dtype = torch.float32, return_posterior: bool = False) -> None:
        check_choice(split, "split", SPLITS)
        check_choice(dtype, "dtype", (torch.float32, torch.float64))
        x, y = task.sample(n, generator=_split_generator(seed, split))
        self.task, self.split, self.seed = task, split, seed
        self.x = x.to(dtype)
        self.targets = y
        self.posterior = task.posterior(x)
        self.return_posterior = return_posterior
        self.n_classes = task.n_classes
        self.input_shape = (task.dim,)

    def __len__(self) -> int:
        return int(self.targets.shape[0])

    def __getitem__(self, i: int):
        if self.return_posterior:
            return self.x[i], self.targets[i], self.posterior[i]
        return self.x[i], self.targets[i]

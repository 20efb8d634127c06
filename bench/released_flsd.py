"""The released FLSD-53 loss (Mukhoti et al. 2020), re-implemented as a peer baseline.

``Losses/focal_loss_adaptive_gamma.py`` of github.com/torrvision/focal_calibration computes the
focal loss with a sample-dependent gamma: ``log_softmax``, the true class's ``log p_t`` and
``p_t = exp(log p_t)``, then a Python loop over the samples of the batch that reads each ``p_t``
with ``.item()`` and picks gamma = 3 (``p_t >= 0.5``), 3 (``0.2 <= p_t < 0.5``) or 5
(``p_t < 0.2``), builds a tensor of the gammas, and returns ``sum(-(1 - p_t)**gamma * log p_t)``
(``size_average=False``; the training script divides nothing). Written anew here operation for
operation, for ``bench_train_step.py``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

_PS = (0.2, 0.5)
_GAMMAS = (5.0, 3.0)
_GAMMA_DIC = dict(zip(_PS, _GAMMAS))


class FocalLossAdaptive(nn.Module):
    def __init__(self, gamma: float = 3.0, size_average: bool = False) -> None:
        super().__init__()
        self.gamma = gamma
        self.size_average = size_average

    def get_gamma_list(self, pt: torch.Tensor) -> torch.Tensor:
        gamma_list = []
        for i in range(pt.shape[0]):
            pt_sample = pt[i].item()
            if pt_sample >= 0.5:
                gamma_list.append(self.gamma)
                continue
            for key in sorted(_GAMMA_DIC):
                if pt_sample < key:
                    gamma_list.append(_GAMMA_DIC[key])
                    break
        return torch.tensor(gamma_list)

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        target = target.view(-1, 1)
        logpt = F.log_softmax(input, dim=1).gather(1, target).view(-1)
        pt = logpt.exp()
        gamma = self.get_gamma_list(pt)
        loss = -1 * (1 - pt) ** gamma * logpt
        return loss.mean() if self.size_average else loss.sum()

"""The sweep's vocabulary: a training loss (:class:`Loss`), one run (:class:`RunSpec`), a block of
runs (:class:`Block`), a profile (:class:`Profile`) and what a block's runs are for (:data:`ROLES`).

A :class:`RunSpec` is one training run plus its post-hoc calibration (dataset, network, loss, seed,
the ``train_classifier`` and ``posthoc_calibration`` template parameters); a :class:`Block` is a
Cartesian product of them; a :class:`Profile` is a list of blocks. The profiles themselves are
:mod:`focalcal.lab.profiles`; :mod:`focalcal.lab.sweep` runs them.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import runfolder

__all__ = ["Loss", "loss", "RunSpec", "Block", "Profile", "ROLES"]


@dataclass(frozen=True)
class Loss:
    """A training loss as the sweep names it: a ``focalcal.losses.make_loss`` key plus parameters."""

    name: str
    params: tuple[tuple[str, Any], ...] = ()
    label: str | None = None

    @property
    def display(self) -> str:
        if self.label:
            return self.label
        if not self.params:
            return self.name
        return self.name + "(" + ",".join(f"{k}={v}" for k, v in self.params) + ")"


def loss(name: str, label: str | None = None, **params: Any) -> Loss:
    return Loss(name, tuple(sorted(params.items())), label)


@dataclass(frozen=True)
class RunSpec:
    """One training run plus its post-hoc calibration."""

    dataset: str
    model: str
    loss: Loss
    seed: int
    train: tuple[tuple[str, Any], ...] = ()
    posthoc: tuple[tuple[str, Any], ...] = ()
    #: keyword arguments of ``make_model`` (e.g. the MLP's ``in_features`` and ``hidden``)
    model_params: tuple[tuple[str, Any], ...] = ()

    @property
    def run_id(self) -> str:
        """The run's folder name: :func:`focalcal.lab.runfolder.run_id` of ``to_dict()`` and the loss's name."""
        return runfolder.run_id(self.to_dict(), self.loss.display)

    def to_dict(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "model": self.model, "loss": self.loss.name,
                "loss_params": dict(self.loss.params), "loss_label": self.loss.display,
                "seed": self.seed, "train": dict(self.train), "posthoc": dict(self.posthoc),
                "model_params": dict(self.model_params)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunSpec:
        return cls(d["dataset"], d["model"],
                   Loss(d["loss"], tuple(sorted(d["loss_params"].items())), d.get("loss_label")),
                   int(d["seed"]), tuple(sorted(d["train"].items())), tuple(sorted(d["posthoc"].items())),
                   tuple(sorted(d["model_params"].items())))

    def train_parameters(self, run_dir: Path) -> dict[str, Any]:
        # papermill passes parameters as Python literals; the loss parameters travel as JSON
        return {"dataset": self.dataset, "model": self.model, "loss": self.loss.name,
                "loss_params": json.dumps(dict(self.loss.params)), "seed": self.seed,
                "out_dir": str(run_dir), **dict(self.train), "model_params": json.dumps(dict(self.model_params))}

    def posthoc_parameters(self, run_dir: Path) -> dict[str, Any]:
        return {"run_dir": str(run_dir), **dict(self.posthoc)}


@dataclass(frozen=True)
class Block:
    """A Cartesian product: every dataset x model x loss x seed, with shared settings.

    ``role`` names the experiment the block's runs serve (one of :data:`ROLES`); the book's pages
    select their runs by it (:func:`focalcal.lab.results.runs_for`), never by dataset or network,
    so that one page reads any profile's results. The role is not part of a run's id: a run is
    what it trains, whichever block asks for it.
    """

    datasets: Sequence[str]
    models: Sequence[str]
    losses: Sequence[Loss]
    seeds: Sequence[int]
    train: dict[str, Any] = field(default_factory=dict)
    posthoc: dict[str, Any] = field(default_factory=dict)
    model_params: dict[str, Any] = field(default_factory=dict)
    role: str = "comparison"

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}; got {self.role!r}")

    def expand(self) -> list[RunSpec]:
        return [RunSpec(d, m, lo, s, tuple(sorted(self.train.items())), tuple(sorted(self.posthoc.items())),
                        tuple(sorted(self.model_params.items())))
                for d, m, lo, s in itertools.product(self.datasets, self.models, self.losses, self.seeds)]


@dataclass(frozen=True)
class Profile:
    description: str
    blocks: Sequence[Block]

    def expand(self) -> list[RunSpec]:
        runs = [r for b in self.blocks for r in b.expand()]
        ids = [r.run_id for r in runs]
        if len(set(ids)) != len(ids):
            raise ValueError("profile expands to duplicate runs")
        return runs

    def runs_of(self, role: str) -> list[RunSpec]:
        """The runs of the blocks with ``role`` (:data:`ROLES`), in block order (none if it has none)."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}; got {role!r}")
        return [r for b in self.blocks if b.role == role for r in b.expand()]

    def roles(self) -> dict[str, list[str]]:
        """The run ids of each role that the profile's blocks have, in block order."""
        return {role: [r.run_id for r in self.runs_of(role)]
                for role in dict.fromkeys(b.role for b in self.blocks)}


#: what a block's runs are for, and the book page that reads them:
ROLES: dict[str, str] = {
    "comparison": "the papers' loss comparison on one network (mukhoti_fmnist, zhou_fmnist, fmnist_focal_ts)",
    "synthetic": "tasks with a known posterior (synthetic_properness)",
    "curvature": "focal loss and the Tr(H) penalty, with the Hessian measured (curvature_measured)",
    "architecture": "focal loss across gamma on one more kind of network, with the Hessian measured "
                    "(curvature_measured's networks)",
    "length": "logits saved after growing numbers of epochs (when_focal_helps)",
    "psi": "focal loss and Psi across capacity and data size (psi_capacity)",
    "ablation": "the comparison's network with one setting of a loss changed (zhou_fmnist's confidence "
                "scores, mukhoti_fmnist's label smoothing 0.1)",
    "selection": "a loss's parameter on a grid, selected on the validation split (zhou_fmnist's cross-validation)",
}

"""The sweep's profiles: tables of training runs (:data:`PROFILES`), and :func:`shrink`.

A profile is a list of blocks of runs (the vocabulary is :mod:`focalcal.lab.spec`). Three
profiles build the book from one results format (:mod:`focalcal.lab.sweep` runs them):

- ``cpu`` (the default): Fashion-MNIST and the synthetic tasks on 2 CPU cores;
- ``gpu``: CIFAR-10/100 on ResNet-50 and Wide-ResNet-26-10, one seed, a compressed paper schedule,
  on one GPU in about a working day;
- ``paper``: the papers' full grids, 5 seeds, for a SLURM cluster;

plus ``smoke`` (every template and loss on tiny data, for the tests). :func:`shrink` turns any of
them into a tiny version with the same structure (one epoch on a few batches), which runs on a CPU.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..losses import DISPLAY_NAMES
from .spec import Block, Loss, Profile, loss

__all__ = [
    "ALL_LOSSES", "ARCHITECTURE_GAMMAS", "CIFAR", "CIFAR_INPUTS", "CLIPPED_LOSSES", "CPU_ARCHITECTURE_TRAIN",
    "CPU_CURVATURE_TRAIN",
    "CPU_FMNIST_DUAL_TRAIN", "CPU_FMNIST_FIG1_TRAIN", "CPU_FMNIST_TRAIN", "CPU_LENGTH_TRAIN",
    "CPU_PSI_SMALL_DATA_TRAIN", "CPU_PSI_TRAIN", "CPU_SYNTHETIC_TRAIN", "CSF_LOSSES", "CURVATURE_GAMMAS",
    "CURVATURE_MLP", "CURVATURE_TAUS", "NETWORK_CURVATURE", "FIG3_LOSSES", "FMNIST_LOSSES", "GPU_CLIPPED_TRAIN",
    "GPU_CURVATURE_MLP", "GPU_CURVATURE_TRAIN", "GPU_FIG1_TRAIN", "GPU_FLSC531",
    "GPU_LENGTH_TRAIN", "GPU_MODELS", "GPU_OTHER_LOSSES", "GPU_PSI_SMALL_DATA_TRAIN",
    "GPU_PSI_TRAIN", "GPU_TRAIN", "KK_EXTRA_LOSSES", "LABEL_SMOOTHING_01", "LENGTH_LOSSES", "MUKHOTI_BASELINES", "PAPER_FLSC531", "PAPER_MODELS", "PAPER_OTHER_LOSSES", "PAPER_SEEDS",
    "PAPER_TINY_TRAIN", "PAPER_TRAIN", "PROFILES", "PSI_GAMMAS", "PSI_LARGE_MLP", "PSI_LS_LOSSES", "PSI_LOSSES",
    "PSI_SMALL_MLP", "SHRUNK_MODEL_PARAMS", "SMOKE_CURVATURE_LOSSES",
    "SMOKE_CURVATURE_TRAIN", "SMOKE_LENGTH_LOSSES", "SMOKE_LENGTH_TRAIN", "SMOKE_PAIR",
    "SMOKE_POSTHOC", "SMOKE_PSI_TRAIN", "SMOKE_TRAIN", "SELECTIVE_VARIANT_LOSSES", "SYNTHETIC_BLOCK", "TABLE1_LOSSES",
    "ZHOU_CV_COVERAGES", "ZHOU_CV_GAMMAS", "ZHOU_CV_LOSSES", "ZHOU_LOSSES",
    "curvature_losses", "get_profile", "page_losses", "psi_blocks", "shrink"]

# The losses every profile compares (Komisarenko & Kull Table 1; Mukhoti Table 1).
TABLE1_LOSSES = (
    loss("ce", label=DISPLAY_NAMES["ce"]),
    loss("focal", gamma=1.0, label="focal (gamma=1)"),
    loss("focal", gamma=3.0, label="focal (gamma=3)"),
    loss("focal", gamma=5.0, label="focal (gamma=5)"),
    loss("flsd53", label=DISPLAY_NAMES["flsd53"]),
    loss("dual_focal", label=DISPLAY_NAMES["dual_focal"]),
)

def _every_loss() -> tuple[Loss, ...]:
    # built from the registry, so that a loss added to focalcal.losses is smoke-tested at once
    from ..losses import LOSSES

    covered = {lo.name for lo in TABLE1_LOSSES}
    extra = tuple(loss(name, label=DISPLAY_NAMES[name]) for name in LOSSES if name not in covered)
    return TABLE1_LOSSES[:2] + extra + TABLE1_LOSSES[4:]


#: every loss of :data:`focalcal.losses.LOSSES` once (with its default parameters), for the smoke profile
ALL_LOSSES = _every_loss()

SMOKE_TRAIN = {"epochs": 1, "train_subset": 256, "eval_subset": 256, "batch_size": 64,
               "schedule": "cpu_adam", "optimizer": "adam", "lr": 1e-3, "device": "auto"}
SMOKE_POSTHOC = {"fts_temperatures": 50}
SMOKE_PAIR = (TABLE1_LOSSES[0], TABLE1_LOSSES[2])  # cross-entropy, focal (gamma=3)

# Fashion-MNIST on 2 CPU cores (the cpu profile's cost: README, "What the profiles cost"): the
# papers' CIFAR schedule (train.SCHEDULES["paper_cifar"]: SGD, momentum 0.9, weight decay 5e-4, learning
# rate / 10 at 150/350 and 250/350 of the epochs) compressed to 18 epochs, on 4 000 training
# images with mini-batches of 32 (more steps per epoch). Cross-entropy then fits its training set
# almost perfectly and overfits the test NLL while the test error still falls (Mukhoti et al.
# 2020, Sec. 3). Validation: the 5 000 images of the fixed split; test: 5 000 of the 10 000 test
# images (a seeded subset per seed) to halve the cost of the per-epoch evaluation.
# The per-epoch records (Mukhoti et al.'s Figs. 2-3 and 10) use the first 1 000 validation and test
# images (evaluating all 10 000 every epoch took twice as long as the training pass); the last
# epoch, whose logits every post-hoc result uses, is evaluated on all of them.
CPU_FMNIST_TRAIN = {"epochs": 18, "train_subset": 4000, "eval_subset": 5000, "batch_size": 32,
                    "schedule": "paper_cifar", "optimizer": "sgd", "lr": 0.05, "device": "auto",
                    "record_subset": 1000}
# Dual focal loss weights a sample by (1 - p_t + p_j)^gamma, up to 2^5 = 32 where the network is
# wrong: with this learning rate and no batch normalisation its three seeds stalled at chance or
# diverged. It is trained with the gradient norm clipped at 2, as Mukhoti et al.'s released code
# does for every loss (the other losses here train without clipping).
CPU_FMNIST_DUAL_TRAIN = {**CPU_FMNIST_TRAIN, "clip_grad_norm": 2.0}
# Mukhoti et al.'s Fig. 1 (training-set reliability at several epochs) and Fig. 3 (cross-entropy
# against focal loss with gamma = 1, 2, 3): these four losses also save the training split's logits
# after epochs 2, 6, 12 and 18 (the learning rate drops after epochs 8 and 13).
CPU_FMNIST_FIG1_TRAIN = {**CPU_FMNIST_TRAIN, "logits_epochs": [2, 6, 12, 18], "train_logits": True}
# Kimura & Naganuma's Figs. 2-3 compare architectures: the comparison's networks trained with CE and
# focal loss, and the ResNet-8 of the architecture role, also measure the curvature of their training
# loss when they finish, all with one protocol (a convolutional network's Hessian-vector product
# costs far more than the MLP's, hence fewer images, steps and probes than the MLP's 1 000, 20 and 10;
# on ResNet-8, 250 images, 10 steps and 5 probes took 14 s of a run per measured loss, these 5 s)
NETWORK_CURVATURE = {"curvature_samples": 100, "curvature_iters": 8, "curvature_probes": 4}

# The rest of the papers' comparisons on the same network and schedule (Mukhoti et al. Tables 1-2:
# Brier, MMCE, label smoothing 0.05, FL-2, FLSc-531, FLSD-532; Zhou et al. Table 1: inverse focal,
# KDE-XE, AURC, their selective-risk loss; Komisarenko & Kull Table 1: FL-7, AdaFocal).
# FLSc-531's gamma steps (5 -> 3 -> 1 after 100 and 250 of 350 epochs) are rescaled to 18 epochs.
FIG3_LOSSES = (TABLE1_LOSSES[0], TABLE1_LOSSES[1], loss("focal", gamma=2.0, label="focal (gamma=2)"),
               TABLE1_LOSSES[2])
MUKHOTI_BASELINES = (loss("brier", label=DISPLAY_NAMES["brier"]),
                     loss("label_smoothing", alpha=0.05, label="label smoothing (0.05)"),
                     loss("flsc531", milestones=[5, 13], label=DISPLAY_NAMES["flsc531"]),
                     loss("flsd532", label=DISPLAY_NAMES["flsd532"]))
ZHOU_LOSSES = (loss("inverse_focal", label=DISPLAY_NAMES["inverse_focal"]), loss("kde_xe", label=DISPLAY_NAMES["kde_xe"]),
               loss("aurc", label=DISPLAY_NAMES["aurc"]))
KK_EXTRA_LOSSES = (loss("focal", gamma=7.0, label="focal (gamma=7)"), loss("adafocal", label=DISPLAY_NAMES["adafocal"]))
# MMCE (lambda = 2) and the selective-risk loss stalled near chance at this learning rate without
# clipping in a 4-epoch pilot (validation accuracy 0.11 and 0.18); like dual focal loss they train
# with the gradient norm clipped at 2. Clipping does not make the selective-risk loss as printed
# (variant "paper") learn: with it the cpu profile's networks still end near chance (about 29 %
# test accuracy), and an investigation found the same with learning rates 0.01-0.1, batches of
# 128, the margin score and a CE warm start. The cause is the loss itself: below tau its weight's
# gradient rewards lowering a sample's confidence (focalcal.losses.selective_risk_loss).
CLIPPED_LOSSES = (TABLE1_LOSSES[5], loss("mmce", label=DISPLAY_NAMES["mmce"]), loss("selective_risk", label=DISPLAY_NAMES["selective_risk"]))
# Zhou et al.'s selective-risk loss as their code computes it (confidence on softmax(softmax(z)),
# histogram over an epoch, nu = 0.05) and the printed loss with its weights detached, trained like
# the printed one (same seeds, same clipping) so that each variant gets its own verdict.
SELECTIVE_VARIANT_LOSSES = (loss("selective_risk", label="selective-risk (released)", variant="released"),
                            loss("selective_risk", label="selective-risk (detached weights)", variant="detached"))
# Zhou et al.'s Fig. 2 (their loss under each confidence score of their App. Table 1) and Mukhoti
# et al.'s choice of label smoothing 0.05 over 0.1 (Sec. 5): the comparison's network and recipe
# with one setting of a loss changed (role "ablation"). The scores are tried on the detached
# variant, the form of the printed loss that trains here (its MSP runs are the detached ones
# above); the released code's double softmax would make its negative entropy constant.
CSF_LOSSES = tuple(loss("selective_risk", label=f"selective-risk (detached weights, {name})", variant="detached",
                        score=score) for score, name in (("neg_entropy", "negative entropy"), ("margin", "softmax margin")))
LABEL_SMOOTHING_01 = loss("label_smoothing", alpha=0.1, label="label smoothing (0.1)")
#: every loss of the Fashion-MNIST comparison, in the order the pages list them
FMNIST_LOSSES = (TABLE1_LOSSES[:5] + (FIG3_LOSSES[2],) + MUKHOTI_BASELINES + ZHOU_LOSSES
                 + KK_EXTRA_LOSSES + CLIPPED_LOSSES)
# the synthetic tasks with one seed (a few minutes): the same losses where the posterior is known
CPU_SYNTHETIC_TRAIN = {"epochs": 15, "train_subset": 0, "eval_subset": 0, "batch_size": 128,
                       "schedule": "cpu_adam", "optimizer": "adam", "lr": 1e-3, "device": "auto"}
# every profile has it: a few CPU-minutes, and the only runs whose true posterior is known
SYNTHETIC_BLOCK = Block(["gaussian_mixture", "charoenphakdee_1d"], ["mlp"], TABLE1_LOSSES, [0],
                        train=CPU_SYNTHETIC_TRAIN, role="synthetic")

# Kimura & Naganuma (2024), Figs. 2-4 at Fashion-MNIST scale (book/experiments/curvature_measured.md):
# a 784-64-10 MLP trained with Adam on 4 000 images for 10 epochs with focal loss at the paper's
# gammas (Fig. 2-3) or with CE + tau Tr(H) (Fig. 4), then lambda_max (20 Lanczos steps) and Tr(H)
# (10 Hutchinson probes) of its training loss and of CE on 1 000 held-out validation images.
# The labels keep these runs apart from the CNN's Table 1 runs.
CURVATURE_GAMMAS = (0.0, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 7.0, 10.0)
CURVATURE_TAUS = (1e-4, 1e-3, 1e-2)  # tau = 0.1 left the network at chance in a pilot
CURVATURE_MLP = {"in_features": 784, "hidden": [64]}
CPU_CURVATURE_TRAIN = {"epochs": 10, "train_subset": 4000, "eval_subset": 2000, "batch_size": 64,
                       "schedule": "cpu_adam", "optimizer": "adam", "lr": 1e-3, "device": "auto",
                       "curvature_samples": 1000, "curvature_iters": 20, "curvature_probes": 10}
SMOKE_CURVATURE_TRAIN = {**SMOKE_TRAIN, "curvature_samples": 128, "curvature_iters": 5,
                         "curvature_probes": 3}


def curvature_losses(gammas: Sequence[float] = CURVATURE_GAMMAS,
                     taus: Sequence[float] = CURVATURE_TAUS) -> tuple[tuple[Loss, ...], tuple[Loss, ...]]:
    """The curvature chapter's focal losses (one per ``gamma``) and CE + tau Tr(H) penalties."""
    focal = tuple(loss("focal", label=f"focal gamma={g:g}", gamma=float(g)) for g in gammas)
    penalty = tuple(loss("hessian_trace", label=f"CE + tau Tr(H), tau={t:g}", lamda=float(t))
                    for t in taus)
    return focal, penalty


# Their Figs. 2-3 compare architectures of different kinds. Besides the MLP above and the comparison's
# CNN, He et al.'s ResNet-8 (residual blocks with batch normalisation; models.MODELS["resnet8"]) is
# trained with focal loss at five gammas with the CNN's optimiser and schedule on 1 500 images for 8
# epochs (a run: 25-29 s alone, 5-9 s of them the curvature; 18 s of training reach 76-77 % test
# accuracy).
ARCHITECTURE_GAMMAS = (0.0, 1.0, 2.0, 3.0, 5.0)
CPU_ARCHITECTURE_TRAIN = {"epochs": 8, "train_subset": 1500, "eval_subset": 2000, "batch_size": 32,
                          "schedule": "paper_cifar", "optimizer": "sgd", "lr": 0.05, "device": "auto",
                          "record_subset": 250, **NETWORK_CURVATURE}

#: the smoke profile's curvature runs: two gammas and one tau, enough to execute the chapter
SMOKE_CURVATURE_LOSSES = sum(curvature_losses((0.0, 3.0), (1e-2,)), ())


# When does focal loss help? (book/experiments/when_focal_helps.md): the same CNN on 2 000
# Fashion-MNIST images, SGD at a constant learning rate 0.02 (so that the logits saved after epoch
# n are those of a network trained for n epochs, not of a schedule's early phase), with the
# validation and test logits saved after 1, 2, 3, 5, 10, 20 and 30 epochs. In a pilot (one seed)
# cross-entropy's TS temperature went from 1.0 after 1-5 epochs to 2.9 after 30, focal loss's with
# gamma = 3 from 0.56-0.65 to 1.0; 1 000 images showed the same, with noisier ECE. The labels keep
# these runs apart from the Table 1 runs of the same network.
LENGTH_LOSSES = (loss("ce", label="CE"), loss("focal", label="focal-1", gamma=1.0),
                 loss("focal", label="focal-3", gamma=3.0), loss("focal", label="focal-5", gamma=5.0))
CPU_LENGTH_TRAIN = {"epochs": 30, "train_subset": 2000, "eval_subset": 1000, "batch_size": 32,
                    "schedule": None, "optimizer": "sgd", "lr": 0.02, "device": "auto",
                    "logits_epochs": [1, 2, 3, 5, 10, 20, 30]}  # a list: specs travel as JSON
SMOKE_LENGTH_TRAIN = {**SMOKE_TRAIN, "logits_epochs": [1]}
SMOKE_LENGTH_LOSSES = LENGTH_LOSSES[::2]  # CE and focal-3

# Charoenphakdee et al. (2021), Figs. 4-6 at Fashion-MNIST scale (book/experiments/psi_capacity.md):
# focal loss at their gammas on MLPs of two capacities (784-64-10 and 784-512-512-10) trained on
# 4 000 images, and the larger one on 400 (their CIFAR10-s keeps a tenth of the data), 2 seeds,
# Adam for 20 epochs; label smoothing 0.1 with cross-entropy in each setting.
# Per-epoch records on 500 validation and test images (an MLP's run is mostly papermill's start).
PSI_GAMMAS = (0.0, 0.5, 1.0, 2.0, 3.0)
PSI_LOSSES = (tuple(loss("focal", label=f"focal gamma={g:g}", gamma=float(g)) for g in PSI_GAMMAS)
              + (LABEL_SMOOTHING_01,))
# Their LS paradigm (Sec. 6.1, Fig. 6): the focal loss at each gamma > 0 trained against labels
# smoothed by 0.1, on the larger network and all the training images (their CIFAR10 ResNet110);
# at gamma = 0 it is the label-smoothing run above.
PSI_LS_LOSSES = tuple(loss("focal", label=f"focal gamma={g:g}, LS 0.1", gamma=float(g), label_smoothing=0.1)
                      for g in PSI_GAMMAS[1:])
PSI_SMALL_MLP = {"in_features": 784, "hidden": [64]}
PSI_LARGE_MLP = {"in_features": 784, "hidden": [512, 512]}
CPU_PSI_TRAIN = {"epochs": 20, "train_subset": 4000, "eval_subset": 5000, "batch_size": 64,
                 "schedule": "cpu_adam", "optimizer": "adam", "lr": 1e-3, "device": "auto",
                 "record_subset": 500}
CPU_PSI_SMALL_DATA_TRAIN = {**CPU_PSI_TRAIN, "train_subset": 400}
SMOKE_PSI_TRAIN = {**SMOKE_TRAIN, "record_subset": 128}


# Zhou et al.'s App. E (Figs. 4 and 6, Tables 2 and 3): the parameters they select by validation
# loss (gamma of inverse and dual focal loss, the low-confidence coverage of their loss, whose
# variant with detached weights is the one that trains here) on a grid, on the Psi chapter's small
# MLP and recipe (a run costs seconds; the comparison's CNN a minute), 2 seeds
ZHOU_CV_GAMMAS = (1.0, 2.0, 3.0, 4.0, 5.0)
ZHOU_CV_COVERAGES = (0.2, 0.5, 0.8, 0.9)
ZHOU_CV_LOSSES = (tuple(loss("inverse_focal", label=f"inverse focal gamma={g:g}", gamma=g) for g in ZHOU_CV_GAMMAS)
                  + tuple(loss("dual_focal", label=f"dual focal gamma={g:g}", gamma=g) for g in ZHOU_CV_GAMMAS)
                  + tuple(loss("selective_risk", label=f"selective-risk (detached weights) coverage={c:g}",
                               variant="detached", coverage=c) for c in ZHOU_CV_COVERAGES))


def psi_blocks(train: dict[str, Any], small_data: dict[str, Any], seeds: Sequence[int],
               losses: Sequence[Loss] = PSI_LOSSES, dataset: str = "fashion_mnist",
               in_features: int = 784, ls_losses: Sequence[Loss] = PSI_LS_LOSSES) -> list[Block]:
    """The Psi chapter's blocks: its three settings (small and large MLP on ``train``, large on
    ``small_data``; the MLPs read ``in_features`` inputs: 784 for Fashion-MNIST, 3 072 for CIFAR),
    and the LS paradigm's ``ls_losses`` on the large MLP with ``train``."""
    small = {**PSI_SMALL_MLP, "in_features": in_features}
    large = {**PSI_LARGE_MLP, "in_features": in_features}
    return [Block([dataset], ["mlp"], lo, seeds, train=t, posthoc=SMOKE_POSTHOC, model_params=mlp, role="psi")
            for lo, mlp, t in ((losses, small, train), (losses, large, train), (losses, large, small_data),
                               (ls_losses, large, train))]


# ------------------------------------------------------------------------ the gpu profile ---
# One GPU for about a working day: the papers' main networks (ResNet-50 and Wide-ResNet-26-10,
# Mukhoti et al. 2020 Table 1; Komisarenko & Kull 2024 Table 1) on CIFAR-10 and CIFAR-100, one
# seed, the papers' CIFAR schedule compressed from 350 to 60 epochs (drops after epochs 26 and 43),
# all 45 000 training images, per-epoch records on every evaluation image. The loaders use worker
# processes and pinned memory ("auto"), the trainer bf16 autocast and channels_last ("auto" on
# CUDA); torch.compile stays off ("torch_compile": True in GPU_TRAIN tries it). The schedule's
# reasoning and the measured cost (about 7.5 GPU-hours on one H100): README, "What the profiles cost".
GPU_TRAIN = {"epochs": 60, "schedule": "paper_cifar", "batch_size": 128, "optimizer": "sgd", "lr": 0.1,
             "device": "auto", "train_subset": 0, "eval_subset": 0}
# Mukhoti et al.'s Fig. 1 (training-set reliability) for the Fig. 3 losses: logits of the
# training split after epochs 5, 20 (before the first drop), 40 and 60
GPU_FIG1_TRAIN = {**GPU_TRAIN, "logits_epochs": [5, 20, 40, 60], "train_logits": True}
# the losses that the cpu profile trains with the gradient norm clipped at 2 are clipped here too,
# so that the two profiles compare the same recipes (Mukhoti et al.'s released code clips every loss)
GPU_CLIPPED_TRAIN = {**GPU_TRAIN, "clip_grad_norm": 2.0}
GPU_MODELS = ("resnet50", "wide_resnet26_10")
CIFAR = ("cifar10", "cifar100")
# FLSc-531's gamma steps (after 100 and 250 of 350 epochs) at 60 epochs
GPU_FLSC531 = loss("flsc531", milestones=[17, 43], label=DISPLAY_NAMES["flsc531"])
#: the Fashion-MNIST comparison's losses other than the main seven (Mukhoti's baselines, Zhou's
#: losses, K&K's FL-7 and AdaFocal), for CIFAR-10 ResNet-50 only
GPU_OTHER_LOSSES = ((MUKHOTI_BASELINES[0], MUKHOTI_BASELINES[1], GPU_FLSC531, MUKHOTI_BASELINES[3])
                    + ZHOU_LOSSES + KK_EXTRA_LOSSES)
# Training length: ResNet-50 on CIFAR-10 at a constant learning rate 0.01 (0.1 would keep the
# network far from fitting its training set), logits after 1-30 epochs
GPU_LENGTH_TRAIN = {**GPU_TRAIN, "epochs": 30, "schedule": None, "lr": 0.01,
                    "logits_epochs": [1, 2, 3, 5, 10, 20, 30]}
# Curvature (Kimura & Naganuma 2024, Figs. 2-4) and Psi (Charoenphakdee et al. 2021, Figs. 4-6):
# the cpu profile's MLPs, reading CIFAR-10's 3 072 inputs, on all 45 000 training images; the
# Hessian-vector products of the curvature measurement and of the Tr(H) penalty stay cheap on an MLP
# (a penalty step on a ResNet-50 would cost several ordinary steps). Psi's small-data setting keeps
# a tenth of the training images (4 500), as their CIFAR10-s does.
CIFAR_INPUTS = 3 * 32 * 32
GPU_CURVATURE_MLP = {**CURVATURE_MLP, "in_features": CIFAR_INPUTS}
GPU_CURVATURE_TRAIN = {**CPU_CURVATURE_TRAIN, "train_subset": 0, "eval_subset": 0}
GPU_PSI_TRAIN = {**CPU_PSI_TRAIN, "train_subset": 0, "eval_subset": 0, "record_subset": 0}
GPU_PSI_SMALL_DATA_TRAIN = {**GPU_PSI_TRAIN, "train_subset": 4500}


def _gpu_blocks(train: dict[str, Any], fig1: dict[str, Any], clipped: dict[str, Any],
                seeds: Sequence[int], models: Sequence[str], other_losses: Sequence[Loss],
                analysis_seeds: Sequence[int]) -> list[Block]:
    """The blocks shared by the gpu and paper profiles: the main comparison on CIFAR-10/100
    (``models``), the other losses on CIFAR-10 ResNet-50, and the training-length, curvature, Psi
    and selection analogues of the cpu profile's blocks, and its synthetic tasks (a few CPU-minutes)."""
    clipped_main = tuple(lo for lo in CLIPPED_LOSSES if lo.name == "dual_focal")
    clipped_other = tuple(lo for lo in CLIPPED_LOSSES if lo.name != "dual_focal")
    return [
        Block(CIFAR, models, FIG3_LOSSES, seeds, train={**fig1, **NETWORK_CURVATURE}),
        Block(CIFAR, models, (TABLE1_LOSSES[3], TABLE1_LOSSES[4]), seeds, train=train),
        Block(CIFAR, models, clipped_main, seeds, train=clipped),
        Block(["cifar10"], ["resnet50"], other_losses, seeds, train=train),
        Block(["cifar10"], ["resnet50"], clipped_other, seeds, train=clipped),
        Block(["cifar10"], ["resnet50"], SELECTIVE_VARIANT_LOSSES, seeds, train=clipped),
        SYNTHETIC_BLOCK,
        Block(["cifar10"], ["resnet50"], LENGTH_LOSSES, seeds, train=GPU_LENGTH_TRAIN, posthoc=SMOKE_POSTHOC,
              role="length"),
        Block(["cifar10"], ["mlp"], curvature_losses()[0], analysis_seeds, train=GPU_CURVATURE_TRAIN,
              posthoc=SMOKE_POSTHOC, model_params=GPU_CURVATURE_MLP, role="curvature"),
        Block(["cifar10"], ["mlp"], curvature_losses()[1], analysis_seeds[:2], train=GPU_CURVATURE_TRAIN,
              posthoc=SMOKE_POSTHOC, model_params=GPU_CURVATURE_MLP, role="curvature"),
        Block(["cifar10"], ["resnet8"], curvature_losses(ARCHITECTURE_GAMMAS, ())[0], analysis_seeds[:2],
              train={**train, **NETWORK_CURVATURE}, posthoc=SMOKE_POSTHOC, role="architecture"),
        *psi_blocks(GPU_PSI_TRAIN, GPU_PSI_SMALL_DATA_TRAIN, analysis_seeds[:2], dataset="cifar10",
                    in_features=CIFAR_INPUTS),
        Block(["cifar10"], ["resnet50"], (LABEL_SMOOTHING_01,), seeds, train=train, role="ablation"),
        Block(["cifar10"], ["resnet50"], CSF_LOSSES, seeds, train=clipped, role="ablation"),
        Block(["cifar10"], ["mlp"], ZHOU_CV_LOSSES, analysis_seeds[:2], train=GPU_PSI_TRAIN, posthoc=SMOKE_POSTHOC,
              model_params={**PSI_SMALL_MLP, "in_features": CIFAR_INPUTS}, role="selection")]


# ---------------------------------------------------------------------- the paper profile ---
# The papers' full grids: CIFAR-10/100 on ResNet-50, ResNet-110, Wide-ResNet-26-10 and
# DenseNet-121 (Mukhoti et al. Table 1; Komisarenko & Kull Table 1) with every loss of the
# Fashion-MNIST comparison, 350 epochs, 5 seeds; Tiny-ImageNet on the papers' ResNet-50 (100
# epochs, batch 64, drops after 40 and 60); the gpu profile's training-length, curvature and Psi
# blocks with 5 seeds. For a SLURM cluster (one GPU and 8 cores per run; --executor slurm). Its
# estimated cost (about 1 400 GPU-hours): README, "What the profiles cost".
PAPER_TRAIN = {**GPU_TRAIN, "epochs": 350}
PAPER_FLSC531 = loss("flsc531", milestones=[100, 250], label=DISPLAY_NAMES["flsc531"])
PAPER_OTHER_LOSSES = tuple(PAPER_FLSC531 if lo.name == "flsc531" else lo for lo in GPU_OTHER_LOSSES)
PAPER_MODELS = ("resnet50", "resnet110", "wide_resnet26_10", "densenet121")
PAPER_SEEDS = (0, 1, 2, 3, 4)
PAPER_TINY_TRAIN = {**PAPER_TRAIN, "epochs": 100, "schedule": "paper_tiny_imagenet", "batch_size": 64}


def _paper_blocks() -> list[Block]:
    blocks = _gpu_blocks(PAPER_TRAIN, {**PAPER_TRAIN, "logits_epochs": [10, 100, 200, 350], "train_logits": True},
                         {**PAPER_TRAIN, "clip_grad_norm": 2.0}, PAPER_SEEDS, PAPER_MODELS,
                         PAPER_OTHER_LOSSES, PAPER_SEEDS)
    # the other losses on the whole grid, not on CIFAR-10 ResNet-50 alone
    blocks[3] = Block(CIFAR, PAPER_MODELS, PAPER_OTHER_LOSSES, PAPER_SEEDS, train=PAPER_TRAIN)
    blocks[4] = Block(CIFAR, PAPER_MODELS, blocks[4].losses, PAPER_SEEDS, train=blocks[4].train)
    blocks[5] = Block(CIFAR, PAPER_MODELS, blocks[5].losses, PAPER_SEEDS, train=blocks[5].train)
    # Tiny-ImageNet: every loss; FLSc-531's steps at 100/350 and 250/350 of its 100 epochs
    tiny_flsc = loss("flsc531", milestones=[29, 71], label=DISPLAY_NAMES["flsc531"])
    unclipped = [lo for lo in FMNIST_LOSSES if lo not in CLIPPED_LOSSES]
    tiny = [Block(["tiny_imagenet"], ["resnet50_tiny"],
                  [tiny_flsc if lo.name == "flsc531" else lo for lo in unclipped], PAPER_SEEDS,
                  train=PAPER_TINY_TRAIN),
            Block(["tiny_imagenet"], ["resnet50_tiny"], CLIPPED_LOSSES, PAPER_SEEDS,
                  train={**PAPER_TINY_TRAIN, "clip_grad_norm": 2.0}),
            Block(["tiny_imagenet"], ["resnet50_tiny"], SELECTIVE_VARIANT_LOSSES, PAPER_SEEDS,
                  train={**PAPER_TINY_TRAIN, "clip_grad_norm": 2.0})]
    return blocks + tiny


PROFILES: dict[str, Profile] = {
    "smoke": Profile(
        "every template and every loss on tiny data, for `make test` (< 3 minutes on 2 cores)",
        # cross-entropy and focal loss run on Fashion-MNIST and on the 1-D synthetic task (so that
        # each experiment chapter has the two losses it compares), every other loss on the
        # Gaussian mixture
        [Block(["fashion_mnist"], ["cnn"], SMOKE_PAIR, [0], posthoc=SMOKE_POSTHOC,
               train={**SMOKE_TRAIN, "logits_epochs": [1], "train_logits": True, "record_subset": 128,
                      **{k: v for k, v in SMOKE_CURVATURE_TRAIN.items() if k.startswith("curvature")}}),
         Block(["charoenphakdee_1d"], ["mlp"], SMOKE_PAIR, [0], train=SMOKE_TRAIN, posthoc=SMOKE_POSTHOC,
               role="synthetic"),
         Block(["gaussian_mixture"], ["mlp"],
               [lo for lo in ALL_LOSSES if lo.name not in {f.name for f in SMOKE_PAIR}], [0],
               train=SMOKE_TRAIN, posthoc=SMOKE_POSTHOC, role="synthetic"),
         Block(["fashion_mnist"], ["mlp"], SMOKE_CURVATURE_LOSSES, [0],
               train=SMOKE_CURVATURE_TRAIN, posthoc=SMOKE_POSTHOC, model_params=CURVATURE_MLP,
               role="curvature"),
         Block(["fashion_mnist"], ["resnet8"], SMOKE_CURVATURE_LOSSES[:2], [0], posthoc=SMOKE_POSTHOC,
               train={**SMOKE_TRAIN, "curvature_samples": 32, "curvature_iters": 3, "curvature_probes": 2},
               role="architecture"),
         Block(["fashion_mnist"], ["cnn"], SMOKE_LENGTH_LOSSES, [0], train=SMOKE_LENGTH_TRAIN,
               posthoc=SMOKE_POSTHOC, role="length"),
         *psi_blocks(SMOKE_PSI_TRAIN, {**SMOKE_PSI_TRAIN, "train_subset": 128}, [0],
                     (PSI_LOSSES[0], PSI_LOSSES[3]), ls_losses=PSI_LS_LOSSES[-1:]),
         Block(["fashion_mnist"], ["cnn"], CSF_LOSSES[1:], [0], train=SMOKE_TRAIN, posthoc=SMOKE_POSTHOC,
               role="ablation"),
         Block(["fashion_mnist"], ["mlp"], (ZHOU_CV_LOSSES[0], ZHOU_CV_LOSSES[3]), [0], train=SMOKE_PSI_TRAIN,
               posthoc=SMOKE_POSTHOC, model_params=PSI_SMALL_MLP, role="selection")]),
    "cpu": Profile(
        "Fashion-MNIST and the synthetic tasks, sized to show the papers' effects on 2 CPU cores",
        [Block(["fashion_mnist"], ["cnn"], FIG3_LOSSES, [0, 1, 2], train={**CPU_FMNIST_FIG1_TRAIN, **NETWORK_CURVATURE}),
         Block(["fashion_mnist"], ["cnn"], (TABLE1_LOSSES[3], KK_EXTRA_LOSSES[0]), [0, 1, 2],
               train={**CPU_FMNIST_TRAIN, **NETWORK_CURVATURE}),
         Block(["fashion_mnist"], ["cnn"], (TABLE1_LOSSES[4],) + MUKHOTI_BASELINES + ZHOU_LOSSES + KK_EXTRA_LOSSES[1:],
               [0, 1, 2], train=CPU_FMNIST_TRAIN),
         Block(["fashion_mnist"], ["cnn"], CLIPPED_LOSSES, [0, 1, 2], train=CPU_FMNIST_DUAL_TRAIN),
         Block(["fashion_mnist"], ["cnn"], SELECTIVE_VARIANT_LOSSES, [0, 1, 2], train=CPU_FMNIST_DUAL_TRAIN),
         SYNTHETIC_BLOCK,
         Block(["fashion_mnist"], ["mlp"], curvature_losses()[0], [0, 1, 2], train=CPU_CURVATURE_TRAIN,
               posthoc=SMOKE_POSTHOC, model_params=CURVATURE_MLP, role="curvature"),
         Block(["fashion_mnist"], ["mlp"], curvature_losses()[1], [0, 1], train=CPU_CURVATURE_TRAIN,
               posthoc=SMOKE_POSTHOC, model_params=CURVATURE_MLP, role="curvature"),
         Block(["fashion_mnist"], ["resnet8"], curvature_losses(ARCHITECTURE_GAMMAS, ())[0], [0, 1],
               train=CPU_ARCHITECTURE_TRAIN, posthoc=SMOKE_POSTHOC, role="architecture"),
         Block(["fashion_mnist"], ["cnn"], LENGTH_LOSSES, [0, 1, 2], train=CPU_LENGTH_TRAIN,
               posthoc=SMOKE_POSTHOC, role="length"),
         *psi_blocks(CPU_PSI_TRAIN, CPU_PSI_SMALL_DATA_TRAIN, [0, 1]),
         Block(["fashion_mnist"], ["cnn"], (LABEL_SMOOTHING_01,), [0, 1, 2], train=CPU_FMNIST_TRAIN,
               role="ablation"),
         Block(["fashion_mnist"], ["cnn"], CSF_LOSSES, [0, 1, 2], train=CPU_FMNIST_DUAL_TRAIN, role="ablation"),
         Block(["fashion_mnist"], ["mlp"], ZHOU_CV_LOSSES, [0, 1], train=CPU_PSI_TRAIN, posthoc=SMOKE_POSTHOC,
               model_params=PSI_SMALL_MLP, role="selection")]),
    "gpu": Profile(
        "CIFAR-10/100 on ResNet-50 and Wide-ResNet-26-10, one seed, the papers' schedule compressed "
        "to 60 epochs, and the cpu profile's other blocks on CIFAR-10 (one GPU, about 7.5 hours on an H100)",
        _gpu_blocks(GPU_TRAIN, GPU_FIG1_TRAIN, GPU_CLIPPED_TRAIN, [0], GPU_MODELS, GPU_OTHER_LOSSES,
                    [0, 1, 2])),
    "paper": Profile(
        "CIFAR-10/100 and Tiny-ImageNet with the papers' networks, schedules and losses, 5 seeds "
        "(a SLURM cluster: about 1 400 GPU-hours)",
        _paper_blocks()),
}


def get_profile(name: str, *, shrunk: bool = False) -> Profile:
    """``PROFILES[name]``, or its :func:`shrink` version (``shrunk=True``)."""
    if name not in PROFILES:
        raise ValueError(f"profile must be one of {', '.join(PROFILES)}; got {name!r}")
    return shrink(PROFILES[name]) if shrunk else PROFILES[name]


#: the smallest variants of the networks that take a size (the others have none: ResNet-50 stays)
SHRUNK_MODEL_PARAMS: dict[str, dict[str, Any]] = {"wide_resnet26_10": {"depth": 8, "width": 1}}


def page_losses() -> list[Loss]:
    # the losses the smoke profile trains on image data: those every experiment page's smoke build
    # has (a list: a loss's parameters may hold lists, which do not hash)
    return [r.loss for r in PROFILES["smoke"].expand() if r.dataset == "fashion_mnist"]


def shrink(profile: Profile, *, epochs: int = 1, train_subset: int = 32, eval_subset: int = 32,
           batch_size: int = 16, losses: Iterable[Loss] | None = None, losses_per_block: int = 2,
           model_params: dict[str, dict[str, Any]] | None = None) -> Profile:
    """A tiny version of ``profile`` with its structure (datasets, networks, blocks, settings that
    change what a run records), to run on a CPU in minutes: every code path but the hardware.

    Each block keeps its datasets, networks and first seed, and of its losses at most
    ``losses_per_block`` of those in ``losses``, in that order (default: the losses the smoke
    profile trains on Fashion-MNIST, so CE, focal loss with gamma = 3, the curvature and Psi
    chapters' pairs: what every experiment page compares); a block left without a loss is dropped. Its training runs ``epochs`` epochs on ``batch_size``-image
    batches of ``eval_subset`` validation and test images and of ``train_subset`` training images
    where the block used all of them; blocks that capped the training split keep their order of
    sizes (the largest cap gets ``train_subset // 2``, the next ``// 4``, ...), so that the Psi
    blocks' full and small-data settings stay apart. Saved-logits epochs become ``[epochs]``,
    ``record_subset`` and the curvature measurement shrink to a few samples and steps, the
    networks of ``model_params`` (default :data:`SHRUNK_MODEL_PARAMS`) get those keyword
    arguments, and the post-hoc step searches a coarse focal-TS grid (the smoke profile's).

    Raises
    ------
    ValueError
        ``epochs``, ``train_subset``, ``eval_subset`` or ``batch_size`` not a positive integer, or
        the shrunk blocks collide (two runs with the same id).
    """
    from .._validation import check_int

    epochs = check_int(epochs, "epochs")
    train_subset = check_int(train_subset, "train_subset")
    eval_subset = check_int(eval_subset, "eval_subset")
    batch_size = check_int(batch_size, "batch_size")
    losses_per_block = check_int(losses_per_block, "losses_per_block")
    keep = page_losses() if losses is None else list(losses)
    shapes = SHRUNK_MODEL_PARAMS if model_params is None else model_params
    capped = sorted({int(b.train.get("train_subset", 0)) for b in profile.blocks} - {0}, reverse=True)
    blocks = []
    for b in profile.blocks:
        chosen = sorted((lo for lo in b.losses if lo in keep), key=keep.index)[:losses_per_block]
        if not chosen:
            continue
        t = dict(b.train)
        cap = int(t.get("train_subset", 0))
        t.update(epochs=epochs, batch_size=batch_size, eval_subset=eval_subset,
                 train_subset=max(batch_size, train_subset >> (capped.index(cap) + 1)) if cap else train_subset)
        if t.get("logits_epochs"):
            t["logits_epochs"] = [epochs]
        if t.get("record_subset"):
            t["record_subset"] = max(1, eval_subset // 2)
        if t.get("curvature_samples"):
            # a few samples and steps: on a CPU a ResNet-50 Hessian-vector product costs ~0.5 s per
            # sample: 32 samples x 5 products took 79 s of a 92 s shrunk run (focal loss measures two losses)
            t.update(curvature_samples=min(eval_subset, 4), curvature_iters=2, curvature_probes=2)
        for model in b.models:
            blocks.append(Block(b.datasets, [model], chosen, list(b.seeds)[:1], train=t,
                                posthoc={**b.posthoc, **SMOKE_POSTHOC},
                                model_params={**b.model_params, **shapes.get(model, {})}, role=b.role))
    small = Profile(f"{profile.description} -- shrunk: {epochs} epoch(s), {train_subset} training "
                    f"images, batches of {batch_size}", blocks)
    small.expand()  # raises on colliding runs
    return small



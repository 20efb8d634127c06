"""Networks that return logits.

======================  ============================================================  ===============
name                    architecture                                                  params (K = 10)
======================  ============================================================  ===============
``mlp``                 fully connected, ReLU, hidden ``(128, 128)`` ("three-layer")  depends on d
``cnn``                 2 x (3x3 conv, ReLU, 2x2 max-pool) + 128-unit FC, for 28x28   421 642 (C = 1)
``resnet50``            CIFAR ResNet-50: bottleneck ``[3, 4, 6, 3]``                  23 520 842
``resnet110``           CIFAR ResNet-110: bottleneck ``[3, 4, 26, 3]``                45 864 522
``resnet50_tiny``       ResNet-50 for 64x64 Tiny-ImageNet: 2x2 final pooling          23 582 282
``wide_resnet26_10``    Wide-ResNet-26-10, post-activation basic blocks               36 481 434
``densenet121``         DenseNet-121 (growth 32) for 32x32                            6 956 298
======================  ============================================================  ===============

The CIFAR networks follow the released code of Mukhoti et al. (2020), which all later papers reuse
(kuangliu's ``pytorch-cifar`` variants): a 3x3 stride-1 stem and no max-pool, so 32x32 inputs reach
the last stage at 4x4. "ResNet-110" there is the *bottleneck* network ``[3, 4, 26, 3]`` of 64-512
planes (3 x 36 + 2 = 110 layers), not He et al.'s 1.7 M-parameter basic-block CIFAR ResNet-110. The
ResNets and DenseNet are torchvision's modules with the stem swapped (DenseNet: stem conv only, no
stem norm/ReLU/pool, exactly the papers' variant); the Wide-ResNet is built from torchvision's
``BasicBlock`` (torchvision has no CIFAR WRN). Initialisation is torchvision's (Kaiming-normal,
fan-out) for the ResNets/WRN/DenseNet and PyTorch's default for the MLP and CNN, so runs are not
bitwise comparable with the papers' code, only architecturally identical.
Every model's last layer is an :class:`torch.nn.Linear` found by :func:`last_linear`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from .._validation import check_int

__all__ = ["MLP", "SmallCNN", "cifar_resnet", "wide_resnet", "densenet121", "make_model",
           "last_linear", "count_parameters", "MODELS", "MODEL_TITLES"]


class MLP(nn.Module):
    """Fully connected ReLU network on flattened inputs.

    Parameters
    ----------
    in_features : int
        Input dimension ``d`` (inputs of shape ``(N, *)`` are flattened to ``(N, d)``).
    n_classes : int
    hidden : sequence of int
        Hidden widths; the default two hidden layers make the "three-layer MLP" of Charoenphakdee
        et al. (2021), Sec. 5.2 (whose widths the paper does not state).
    """

    def __init__(self, in_features: int, n_classes: int, hidden: Sequence[int] = (128, 128)) -> None:
        super().__init__()
        widths = [check_int(in_features, "in_features")] + [check_int(h, "hidden") for h in hidden]
        layers: list[nn.Module] = [nn.Flatten()]
        for a, b in zip(widths[:-1], widths[1:]):
            layers += [nn.Linear(a, b), nn.ReLU(inplace=True)]
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(widths[-1], check_int(n_classes, "n_classes", minimum=2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: ``(N, *)`` -> logits ``(N, K)``."""
        return self.fc(self.features(x))


class SmallCNN(nn.Module):
    """A small CNN for 28x28 images (Fashion-MNIST): conv32-pool-conv64-pool-FC128-FC(K).

    Inputs of another size are average-pooled to 7x7 after the convolutions, so shapes still fit.
    """

    def __init__(self, n_classes: int = 10, in_channels: int = 1, width: int = 32,
                 hidden: int = 128) -> None:
        super().__init__()
        c = check_int(width, "width")
        self.features = nn.Sequential(
            nn.Conv2d(check_int(in_channels, "in_channels"), c, 3, padding=1), nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(c, 2 * c, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.AdaptiveAvgPool2d((7, 7)), nn.Flatten(),
            nn.Linear(2 * c * 49, check_int(hidden, "hidden")), nn.ReLU(inplace=True),
        )
        self.fc = nn.Linear(hidden, check_int(n_classes, "n_classes", minimum=2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: ``(N, C, 28, 28)`` -> logits ``(N, K)``."""
        return self.fc(self.features(x))


def _stem(in_channels: int, out_channels: int) -> nn.Conv2d:
    conv = nn.Conv2d(in_channels, out_channels, 3, stride=1, padding=1, bias=False)
    nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")
    return conv


_RESNET_LAYERS = {50: [3, 4, 6, 3], 101: [3, 4, 23, 3], 110: [3, 4, 26, 3], 152: [3, 8, 36, 3]}


def cifar_resnet(depth: int = 50, n_classes: int = 10, in_channels: int = 3,
                 pool_size: int = 1) -> nn.Module:
    """Bottleneck ResNet for 32x32 (or 64x64) inputs: torchvision's ResNet, 3x3 stem, no max-pool.

    Parameters
    ----------
    depth : {50, 101, 110, 152}
        ``[3, 4, 6, 3]``, ``[3, 4, 23, 3]``, ``[3, 4, 26, 3]``, ``[3, 8, 36, 3]`` bottleneck blocks.
    pool_size : int
        Output size of the final adaptive average pool: 1 (CIFAR, global pooling of the 4x4 map) or
        2 (the papers' Tiny-ImageNet ResNet-50, whose FC layer sees ``2048 * 4`` features).
    """
    from torchvision.models.resnet import Bottleneck, ResNet
    if depth not in _RESNET_LAYERS:
        raise ValueError(f"depth must be one of {sorted(_RESNET_LAYERS)}, got {depth!r}")
    ps = check_int(pool_size, "pool_size")
    model = ResNet(Bottleneck, _RESNET_LAYERS[depth], num_classes=check_int(n_classes, "n_classes", 2))
    model.conv1 = _stem(check_int(in_channels, "in_channels"), 64)
    model.maxpool = nn.Identity()
    if ps != 1:
        model.avgpool = nn.AdaptiveAvgPool2d(ps)
        model.fc = nn.Linear(2048 * ps * ps, n_classes)
    return model


class WideResNet(nn.Module):
    """Wide-ResNet-``depth``-``width`` for 32x32 inputs as in the papers' code.

    Stem 3x3 conv (16) + BN + ReLU, then three stages of ``(depth - 2) / 6`` post-activation
    basic blocks (torchvision's ``BasicBlock``) of ``16 w``, ``32 w``, ``64 w`` channels (strides
    1, 2, 2; a 1x1 conv + BN projection where the shape changes), global average pooling, linear.
    """

    def __init__(self, depth: int = 26, width: int = 10, n_classes: int = 10,
                 in_channels: int = 3) -> None:
        super().__init__()
        from torchvision.models.resnet import BasicBlock
        if (depth - 2) % 6 != 0 or depth < 8:
            raise ValueError(f"depth must be 6 n + 2 with n >= 1 (e.g. 26), got {depth!r}")
        n = (depth - 2) // 6
        w = check_int(width, "width")
        self.conv1 = _stem(check_int(in_channels, "in_channels"), 16)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu = nn.ReLU(inplace=True)
        stages, planes_in = [], 16
        for planes, stride in ((16 * w, 1), (32 * w, 2), (64 * w, 2)):
            down = None
            if stride != 1 or planes_in != planes:
                down = nn.Sequential(nn.Conv2d(planes_in, planes, 1, stride=stride, bias=False),
                                     nn.BatchNorm2d(planes))
            blocks = [BasicBlock(planes_in, planes, stride, down)]
            blocks += [BasicBlock(planes, planes) for _ in range(n - 1)]
            stages.append(nn.Sequential(*blocks))
            planes_in = planes
        self.layer1, self.layer2, self.layer3 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(planes_in, check_int(n_classes, "n_classes", minimum=2))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: ``(N, C, 32, 32)`` -> logits ``(N, K)``."""
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def wide_resnet(depth: int = 26, width: int = 10, n_classes: int = 10, in_channels: int = 3) -> WideResNet:
    """:class:`WideResNet` (default: WRN-26-10 of Mukhoti et al.)."""
    return WideResNet(depth, width, n_classes, in_channels)


def densenet121(n_classes: int = 10, in_channels: int = 3) -> nn.Module:
    """torchvision's DenseNet-121 adapted to 32x32: 3x3 stride-1 stem, no stem norm/ReLU/max-pool.

    With these changes the network is the papers' (kuangliu) DenseNet-121 layer for layer: dense
    layers BN-ReLU-1x1(128)-BN-ReLU-3x3(32), transitions BN-ReLU-1x1-avgpool(2), final BN-ReLU,
    global pooling of the 4x4 map, linear; 6 956 298 parameters for 10 classes.
    """
    from torchvision.models import densenet121 as tv_densenet121
    model = tv_densenet121(weights=None, num_classes=check_int(n_classes, "n_classes", minimum=2))
    model.features.conv0 = _stem(check_int(in_channels, "in_channels"), 64)
    model.features.norm0 = nn.Identity()
    model.features.relu0 = nn.Identity()
    model.features.pool0 = nn.Identity()
    return model


def last_linear(model: nn.Module) -> nn.Linear:
    """The network's final linear layer (``fc``, ``classifier``, ``linear`` or ``head``, else the
    last :class:`~torch.nn.Linear` registered)."""
    for attr in ("fc", "classifier", "linear", "head"):
        m = getattr(model, attr, None)
        if isinstance(m, nn.Linear):
            return m
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    if not linears:
        raise ValueError(f"model {type(model).__name__} has no nn.Linear layer to use as its last layer")
    return linears[-1]


def count_parameters(model: nn.Module, trainable_only: bool = True) -> int:
    """Number of (trainable) parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def _mlp(n_classes: int, in_channels: int, in_features: int | None = None,
         hidden: int | Sequence[int] = (128, 128)) -> nn.Module:
    # a sweep's JSON model_params give a list, or a single width as a number
    widths = (hidden,) if isinstance(hidden, int) else tuple(hidden)
    return MLP(in_channels if in_features is None else in_features, n_classes, widths)


MODELS: dict[str, Callable[..., nn.Module]] = {
    "mlp": _mlp,
    "cnn": lambda n_classes, in_channels, **kw: SmallCNN(n_classes, in_channels, **kw),
    "resnet50": lambda n_classes, in_channels, **kw: cifar_resnet(50, n_classes, in_channels, **kw),
    "resnet110": lambda n_classes, in_channels, **kw: cifar_resnet(110, n_classes, in_channels, **kw),
    "resnet50_tiny": lambda n_classes, in_channels, **kw: cifar_resnet(
        50, n_classes, in_channels, pool_size=kw.pop("pool_size", 2), **kw),
    "wide_resnet26_10": lambda n_classes, in_channels, **kw: wide_resnet(
        kw.pop("depth", 26), kw.pop("width", 10), n_classes, in_channels, **kw),
    # He et al.'s (2016) CIFAR ResNet-8: one basic block per stage (16, 32, 64 channels), 78k parameters
    "resnet8": lambda n_classes, in_channels, **kw: wide_resnet(8, 1, n_classes, in_channels, **kw),
    "densenet121": lambda n_classes, in_channels, **kw: densenet121(n_classes, in_channels, **kw),
}
#: the networks of :data:`MODELS` as prose names them (the papers' names; the book's pages use them)
MODEL_TITLES: dict[str, str] = {
    "mlp": "MLP", "cnn": "small CNN", "resnet50": "ResNet-50", "resnet110": "ResNet-110",
    "resnet50_tiny": "ResNet-50", "wide_resnet26_10": "Wide-ResNet-26-10", "densenet121": "DenseNet-121",
    "resnet8": "ResNet-8",
}


def make_model(name: str, n_classes: int, in_channels: int = 3, *, seed: int | None = None,
               **kwargs: Any) -> nn.Module:
    """Build a network of :data:`MODELS`; it maps inputs to logits of shape ``(N, n_classes)``.

    A sweep run passes keyword arguments here through its ``model_params``
    (:class:`focalcal.lab.spec.Block`), e.g. ``{"in_features": 784, "hidden": [64]}`` for an MLP on
    Fashion-MNIST images: without ``in_features`` the MLP takes the dataset's ``in_channels`` as its
    input size, which is right for the vector-valued synthetic tasks only.

    Parameters
    ----------
    name : str
        A key of :data:`MODELS`.
    n_classes : int
    in_channels : int
        Image channels; for ``"mlp"`` the input dimension ``d`` unless ``in_features`` is given
        (``DATASETS[name].in_channels`` is right for both).
    seed : int, optional
        Initialise the weights under ``torch.manual_seed(seed)`` without touching the global RNG
        state, so the same seed gives the same network.
    **kwargs
        Passed to the constructor (``in_features=`` and ``hidden=``, a width or a sequence of
        widths, for the MLP; ``depth=``/``width=`` for the WRN, ...); a sweep run's
        ``model_params``.
    """
    if name not in MODELS:
        raise ValueError(f"name must be one of {', '.join(repr(n) for n in MODELS)}; got {name!r}")
    n_classes = check_int(n_classes, "n_classes", minimum=2)
    in_channels = check_int(in_channels, "in_channels")
    if seed is None:
        return MODELS[name](n_classes, in_channels, **kwargs)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return MODELS[name](n_classes, in_channels, **kwargs)

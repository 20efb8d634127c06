"""Networks: output shapes on tiny batches, parameter counts against independent counts."""

from __future__ import annotations

import pytest
import torch
import torchvision
from torch import nn

from focalcal.lab.models import (MLP, MODEL_TITLES, MODELS, SmallCNN, cifar_resnet, count_parameters,
                                 last_linear, make_model)


def _bn(c: int) -> int:
    return 2 * c


def _n_params(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


# --------------------------------------------------------------------------- parameter counts ---

def test_small_cnn_count_by_hand():
    # conv 1->32 3x3 (+bias), conv 32->64 3x3 (+bias), FC 64*7*7->128, FC 128->10
    expected = (1 * 9 + 1) * 32 + (32 * 9 + 1) * 64 + (64 * 49 + 1) * 128 + (128 + 1) * 10
    assert expected == 421_642
    assert count_parameters(make_model("cnn", 10, 1)) == expected


def test_mlp_count_by_hand():
    m = make_model("mlp", 3, in_channels=1, hidden=(16, 8))
    assert count_parameters(m) == (1 + 1) * 16 + (16 + 1) * 8 + (8 + 1) * 3
    m = make_model("mlp", 10, in_features=784)
    assert count_parameters(m) == (784 + 1) * 128 + (128 + 1) * 128 + (128 + 1) * 10


def test_resnet50_count_matches_torchvision_and_published_value():
    ours = count_parameters(make_model("resnet50", 10))
    tv = _n_params(torchvision.models.resnet50(weights=None, num_classes=10))
    # only the stem differs from torchvision's ImageNet ResNet-50: 7x7 -> 3x3 conv (max-pool has no
    # parameters)
    assert ours == tv - 7 * 7 * 3 * 64 + 3 * 3 * 3 * 64
    # the value printed for kuangliu/pytorch-cifar's ResNet50 (the papers' network)
    assert ours == 23_520_842


def test_resnet110_is_resnet101_plus_three_bottlenecks():
    ours = count_parameters(make_model("resnet110", 10))
    tv101 = _n_params(torchvision.models.resnet101(weights=None, num_classes=10))
    # one extra bottleneck of stage 3: 1x1 1024->256, 3x3 256->256, 1x1 256->1024, three BNs
    block = 1024 * 256 + _bn(256) + 9 * 256 * 256 + _bn(256) + 256 * 1024 + _bn(1024)
    assert ours == tv101 - 7 * 7 * 3 * 64 + 3 * 3 * 3 * 64 + 3 * block


def test_resnet50_tiny_has_2x2_pooled_head():
    m = make_model("resnet50_tiny", 200)
    assert last_linear(m).in_features == 2048 * 4
    assert count_parameters(m) == 23_520_842 - (2048 * 10 + 10) + (8192 * 200 + 200)


def _wrn_count(depth: int, k: int, n_classes: int) -> int:
    n = (depth - 2) // 6
    total = 3 * 9 * 16 + _bn(16)
    w_in = 16
    for w in (16 * k, 32 * k, 64 * k):
        # every stage's first block projects with a 1x1 conv + BN, except when the shape is kept
        # (stage 1 with k = 1: 16 -> 16 channels at stride 1)
        projection = w_in * w + _bn(w) if (w_in != w or w != 16 * k) else 0
        first = 9 * w_in * w + _bn(w) + 9 * w * w + _bn(w) + projection
        total += first + (n - 1) * (2 * 9 * w * w + 2 * _bn(w))
        w_in = w
    return total + w_in * n_classes + n_classes


def test_wide_resnet_26_10_count_by_formula():
    assert count_parameters(make_model("wide_resnet26_10", 10)) == _wrn_count(26, 10, 10) == 36_481_434
    # a small member of the family exercises the same builder cheaply
    assert count_parameters(make_model("wide_resnet26_10", 5, depth=8, width=1)) == _wrn_count(8, 1, 5)


def test_densenet121_count():
    ours = count_parameters(make_model("densenet121", 10))
    tv = _n_params(torchvision.models.densenet121(weights=None, num_classes=10))
    # torchvision's stem conv7x7 + norm0 replaced by one 3x3 conv and nothing else
    assert ours == tv - 7 * 7 * 3 * 64 + 3 * 3 * 3 * 64 - _bn(64)
    assert ours == 6_956_298  # kuangliu/pytorch-cifar DenseNet121, the papers' network


# ------------------------------------------------------------------------------------- shapes ---

@pytest.mark.parametrize("name,shape,in_ch", [
    ("mlp", (3, 5), 5),
    ("cnn", (3, 1, 28, 28), 1),
    ("resnet50", (2, 3, 16, 16), 3),
    ("resnet110", (1, 3, 16, 16), 3),
    ("resnet50_tiny", (1, 3, 16, 16), 3),
    ("densenet121", (1, 3, 16, 16), 3),
    ("resnet8", (2, 1, 28, 28), 1),
])
def test_output_shapes(name, shape, in_ch):
    m = make_model(name, 7, in_ch).eval()
    with torch.no_grad():
        out = m(torch.randn(*shape))
    assert out.shape == (shape[0], 7)
    assert out.dtype == torch.float32 and bool(torch.isfinite(out).all())


def test_wide_resnet_shape_small_member():
    m = make_model("wide_resnet26_10", 4, depth=14, width=2).eval()
    with torch.no_grad():
        assert m(torch.randn(2, 3, 32, 32)).shape == (2, 4)


def test_cifar_resnet_has_no_maxpool_and_reaches_4x4():
    m = cifar_resnet(50, 10).eval()
    seen = {}

    def hook(mod, inputs, output):
        seen["shape"] = tuple(output.shape)

    m.layer4.register_forward_hook(hook)
    with torch.no_grad():
        m(torch.zeros(1, 3, 32, 32))
    assert seen["shape"] == (1, 2048, 4, 4)
    assert m.conv1.kernel_size == (3, 3) and m.conv1.stride == (1, 1)
    assert not any(isinstance(x, nn.MaxPool2d) for x in m.modules())


def test_in_channels_one_for_resnet():
    m = make_model("resnet50", 3, in_channels=1).eval()
    with torch.no_grad():
        assert m(torch.randn(2, 1, 16, 16)).shape == (2, 3)


def test_cnn_backward_gives_finite_gradients():
    m = SmallCNN(10, 1)
    loss = nn.functional.cross_entropy(m(torch.randn(4, 1, 28, 28)), torch.tensor([0, 1, 2, 3]))
    loss.backward()
    assert all(p.grad is not None and bool(torch.isfinite(p.grad).all()) for p in m.parameters())


# ----------------------------------------------------------------------------------- registry ---

def test_make_model_unknown_name_lists_valid():
    with pytest.raises(ValueError, match="^name must be one of 'mlp', 'cnn', 'resnet50'") as err:
        make_model("resnet18", 10)
    assert "densenet121" in str(err.value)


@pytest.mark.parametrize("kw", [{"n_classes": 1}, {"in_channels": 0}])
def test_make_model_bad_sizes(kw):
    args = {"n_classes": 10, "in_channels": 1, **kw}
    with pytest.raises(ValueError, match=next(iter(kw))):
        make_model("cnn", **args)


def test_make_model_seed_reproducible_and_leaves_global_rng():
    torch.manual_seed(123)
    state = torch.get_rng_state()
    a = make_model("cnn", 10, 1, seed=5)
    b = make_model("cnn", 10, 1, seed=5)
    c = make_model("cnn", 10, 1, seed=6)
    assert torch.equal(torch.get_rng_state(), state)
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)
    assert not torch.equal(a.fc.weight, c.fc.weight)


def test_resnet8_is_the_cifar_resnet_of_depth_8():
    # He et al. (2016), Sec. 4.2: 6n + 2 layers, n = 1: a 3x3 stem of 16 channels, one basic block
    # per stage of 16, 32 and 64 channels (projection shortcuts where the shape changes), linear head
    m = make_model("resnet8", 10)
    convs = [c for c in m.modules() if isinstance(c, nn.Conv2d)]
    assert [c.out_channels for c in convs if c.kernel_size == (3, 3)] == [16, 16, 16, 32, 32, 64, 64]
    assert count_parameters(m) == count_parameters(make_model("wide_resnet26_10", 10, depth=8, width=1))
    assert 70_000 < count_parameters(m) < 90_000
    assert MODEL_TITLES["resnet8"] == "ResNet-8"


def test_registry_covers_required_architectures():
    assert {"mlp", "cnn", "resnet8", "resnet50", "resnet110", "wide_resnet26_10", "densenet121"} <= set(MODELS)


def test_last_linear():
    mlp = MLP(3, 2)
    assert last_linear(mlp) is mlp.fc
    m = make_model("densenet121", 10)
    assert last_linear(m) is m.classifier
    seq = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    assert last_linear(seq) is seq[2]
    with pytest.raises(ValueError, match="^model Sequential has no nn.Linear layer"):
        last_linear(nn.Sequential(nn.ReLU()))

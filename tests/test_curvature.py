"""Curvature over a data set (focalcal.losses.curvature) against the exact Hessian of a tiny network.

The exact Hessian comes from ``torch.autograd.functional.hessian`` on the flattened parameters of
an MLP with 44 parameters; the eigenvalue must agree to 1e-6 relative in float64 and the
Hutchinson trace within a few of its standard errors.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn
from torch.func import functional_call

from focalcal import losses as L


def tiny_mlp(dtype=torch.float64, seed=0) -> nn.Module:
    torch.manual_seed(seed)
    # 3 -> 5 -> 4 (tanh): 3*5 + 5 + 5*4 + 4 = 44 parameters, a smooth network (no ReLU kinks)
    net = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 4)).to(dtype)
    return net


def tiny_data(n=40, dtype=torch.float64, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=g, dtype=dtype) * 2
    y = torch.randint(0, 4, (n,), generator=g)
    return x, y


def exact_hessian(net: nn.Module, loss_fn, x, y) -> torch.Tensor:
    names = [n for n, _ in net.named_parameters()]
    shapes = [p.shape for p in net.parameters()]
    flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()])

    def f(theta):
        chunks = torch.split(theta, [math.prod(s) for s in shapes])
        params = {n: c.view(s) for n, c, s in zip(names, chunks, shapes)}
        return loss_fn(functional_call(net, params, (x,)), y)

    return torch.autograd.functional.hessian(f, flat)


def focal2(z, y):
    return L.focal_loss_reference(z, y, 2.0)


LOSS_FNS = {"cross-entropy": L.cross_entropy_loss, "focal gamma=2": focal2,
            "focal gamma=0.5": lambda z, y: L.focal_loss_reference(z, y, 0.5)}


@pytest.mark.parametrize("name", list(LOSS_FNS))
def test_lambda_max_matches_exact_hessian(name):
    net, (x, y) = tiny_mlp(), tiny_data()
    loss_fn = LOSS_FNS[name]
    H = exact_hessian(net, loss_fn, x, y)
    assert H.shape == (44, 44)
    exact = float(torch.linalg.eigvalsh(H)[-1])
    batches = [(x[:23], y[:23]), (x[23:], y[23:])]  # unequal batches
    # Lanczos with as many steps as parameters spans the whole space: exact up to rounding
    got = L.hessian_max_eigenvalue(net, loss_fn, batches, n_iter=44,
                                   generator=torch.Generator().manual_seed(0))
    assert got == pytest.approx(exact, rel=1e-6)
    # a few steps already get the top of the spectrum close, from below (a Ritz value)
    few = L.hessian_max_eigenvalue(net, loss_fn, batches, n_iter=12,
                                   generator=torch.Generator().manual_seed(0))
    assert few <= exact * (1 + 1e-9) and few == pytest.approx(exact, rel=1e-2)


@pytest.mark.parametrize("name", list(LOSS_FNS))
def test_hutchinson_trace_within_its_standard_error(name):
    net, (x, y) = tiny_mlp(), tiny_data()
    loss_fn = LOSS_FNS[name]
    exact = float(exact_hessian(net, loss_fn, x, y).trace())
    est = L.hessian_trace(net, loss_fn, [(x, y)], n_probes=300, generator=torch.Generator().manual_seed(3))
    assert est.n_probes == 300 and 0 < est.std_error < 0.2 * abs(exact)
    assert abs(est.trace - exact) < 4 * est.std_error


def test_batching_gives_the_same_result_as_one_batch():
    net, (x, y) = tiny_mlp(), tiny_data()
    one = [(x, y)]
    split = [(x[:3], y[:3]), (x[3:25], y[3:25]), (x[25:], y[25:])]
    for fn in (lambda b: L.hessian_max_eigenvalue(net, focal2, b, n_iter=8,
                                                  generator=torch.Generator().manual_seed(5)),
               lambda b: L.hessian_trace(net, focal2, b, n_probes=6,
                                         generator=torch.Generator().manual_seed(5)).trace):
        assert fn(split) == pytest.approx(fn(one), rel=1e-10)
    # a DataLoader is re-iterable: accepted and equal
    ds = torch.utils.data.TensorDataset(x, y)
    loader = torch.utils.data.DataLoader(ds, batch_size=16)
    assert L.hessian_trace(net, focal2, loader, n_probes=6, generator=torch.Generator().manual_seed(5)).trace \
        == pytest.approx(L.hessian_trace(net, focal2, one, n_probes=6,
                                         generator=torch.Generator().manual_seed(5)).trace, rel=1e-10)


def test_float32_runs_and_is_close_to_float64():
    net64, (x, y) = tiny_mlp(), tiny_data()
    net32 = tiny_mlp(torch.float32)
    net32.load_state_dict({k: v.float() for k, v in net64.state_dict().items()})
    exact = float(torch.linalg.eigvalsh(exact_hessian(net64, focal2, x, y))[-1])
    got = L.hessian_max_eigenvalue(net32, focal2, [(x.float(), y)], n_iter=44,
                                   generator=torch.Generator().manual_seed(0))
    assert isinstance(got, float) and got == pytest.approx(exact, rel=1e-3)
    est = L.hessian_trace(net32, focal2, [(x.float(), y)], n_probes=4)
    assert math.isfinite(est.trace) and math.isfinite(est.std_error)


def test_model_mode_is_restored_and_parameters_untouched():
    net, (x, y) = tiny_mlp(), tiny_data()
    before = [p.detach().clone() for p in net.parameters()]
    net.train()
    L.hessian_trace(net, L.cross_entropy_loss, [(x, y)], n_probes=2)
    assert net.training
    net.eval()
    L.hessian_max_eigenvalue(net, L.cross_entropy_loss, [(x, y)], n_iter=3)
    assert not net.training
    assert all(torch.equal(a, b.detach()) for a, b in zip(before, net.parameters()))
    assert all(p.grad is None for p in net.parameters())


def test_focal_loss_reference_matches_fused_focal_loss_and_is_finite_at_saturation():
    g = torch.Generator().manual_seed(0)
    z = torch.randn(64, 5, generator=g, dtype=torch.float64) * 4
    y = torch.randint(0, 5, (64,), generator=g)
    z[0, y[0]] = 200.0  # p_t == 1 exactly: (1 - p_t)^gamma and its derivatives are 0 there
    for gamma in (0.0, 0.5, 1.0, 2.0, 5.0):
        for reduction in ("mean", "sum", "none"):
            torch.testing.assert_close(L.focal_loss_reference(z, y, gamma, reduction=reduction),
                                       L.focal_loss(z, y, gamma, reduction=reduction))
        a = z.clone().requires_grad_(True)
        b = z.clone().requires_grad_(True)
        ga, = torch.autograd.grad(L.focal_loss_reference(a, y, gamma), a, create_graph=True)
        gb, = torch.autograd.grad(L.focal_loss(b, y, gamma), b)
        torch.testing.assert_close(ga, gb)
        hess_row, = torch.autograd.grad(ga[:, 0].sum(), a)  # the double backward
        assert torch.isfinite(hess_row).all()
    ignored = y.clone()
    ignored[:5] = -100
    torch.testing.assert_close(L.focal_loss_reference(z, ignored, 2.0), L.focal_loss(z, ignored, 2.0))


def test_fused_focal_loss_is_refused_with_a_pointer_to_the_reference():
    net, (x, y) = tiny_mlp(), tiny_data()
    with pytest.raises(ValueError, match="loss_fn must be twice differentiable.*focal_loss_reference"):
        L.hessian_trace(net, lambda z, t: L.focal_loss(z, t, 2.0), [(x, y)], n_probes=1)


def test_bad_arguments_raise_value_error_naming_them():
    net, (x, y) = tiny_mlp(), tiny_data()
    data = [(x, y)]
    with pytest.raises(ValueError, match="model"):
        L.hessian_trace("net", L.cross_entropy_loss, data)
    frozen = tiny_mlp().requires_grad_(False)
    with pytest.raises(ValueError, match="model"):
        L.hessian_max_eigenvalue(frozen, L.cross_entropy_loss, data)
    with pytest.raises(ValueError, match="loss_fn"):
        L.hessian_trace(net, "ce", data)
    with pytest.raises(ValueError, match="loss_fn"):
        L.hessian_trace(net, lambda z, t: L.cross_entropy_loss(z, t, reduction="none"), data)
    with pytest.raises(ValueError, match="batches"):
        L.hessian_trace(net, L.cross_entropy_loss, iter(data))
    with pytest.raises(ValueError, match="batches"):
        L.hessian_trace(net, L.cross_entropy_loss, [])
    with pytest.raises(ValueError, match="batches"):
        L.hessian_trace(net, L.cross_entropy_loss, [x])
    with pytest.raises(ValueError, match="n_iter"):
        L.hessian_max_eigenvalue(net, L.cross_entropy_loss, data, n_iter=0)
    with pytest.raises(ValueError, match="n_probes"):
        L.hessian_trace(net, L.cross_entropy_loss, data, n_probes=0)
    with pytest.raises(ValueError, match="gamma"):
        L.focal_loss_reference(torch.zeros(2, 3), torch.tensor([0, 1]), -1.0)


def test_hessian_trace_loss_takes_labels():
    net, (x, y) = tiny_mlp(), tiny_data()
    out = L.hessian_trace_loss(net(x), labels=y, model=net, lamda=0.0)
    torch.testing.assert_close(out, L.cross_entropy_loss(net(x), y))


def test_model_params_flow_from_a_block_to_make_model_and_into_the_run_id():
    from focalcal.lab import spec
    from focalcal.lab.models import count_parameters, make_model

    base = spec.Block(["fashion_mnist"], ["mlp"], [spec.loss("ce")], [0], train={"epochs": 1})
    sized = spec.Block(["fashion_mnist"], ["mlp"], [spec.loss("ce")], [0], train={"epochs": 1},
                        model_params={"in_features": 784, "hidden": [16]})
    plain, wide = base.expand()[0], sized.expand()[0]
    assert plain.to_dict()["model_params"] == {} and plain.train_parameters(".")["model_params"] == "{}"
    assert spec.RunSpec.from_dict(plain.to_dict()).run_id == plain.run_id
    assert wide.run_id != plain.run_id
    assert spec.RunSpec.from_dict(wide.to_dict()).to_dict() == wide.to_dict()
    kw = json.loads(wide.train_parameters(".")["model_params"])
    net = make_model("mlp", 10, 1, seed=0, **kw)
    assert count_parameters(net) == 784 * 16 + 16 + 16 * 10 + 10
    assert net(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
    assert count_parameters(make_model("mlp", 10, 1, in_features=784, hidden=16)) == count_parameters(net)
    with pytest.raises(ValueError, match="hidden"):
        make_model("mlp", 10, 1, in_features=784, hidden=[0])

import math

import pytest
import torch
from tolerance import EXACT, assert_close

from ablate.errors import UnknownNameError
from ablate.registry import ALL_REGISTRIES
from ablate.rl import KL_ESTIMATORS, kl_penalty

F64 = torch.float64


def test_registry_kind_and_names():
    assert ALL_REGISTRIES["kl estimator"] is KL_ESTIMATORS
    assert KL_ESTIMATORS.names() == ["k1", "k2", "k3"]


def test_hand_computed_values_and_gradients():
    logp = torch.tensor([[-1.0, -2.0]], dtype=F64, requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0]], dtype=F64)  # d = logp - ref = [0.5, -1.0]
    expected = {
        "k1": ([0.5, -1.0], [1.0, 1.0]),
        "k2": ([0.125, 0.5], [0.5, -1.0]),  # d(0.5 d^2) = d
        # k3 = exp(-d) + d - 1: exp(-0.5) - 0.5 = 0.10653066, e - 2 = 0.71828183; grad 1 - exp(-d)
        "k3": ([math.exp(-0.5) - 0.5, math.e - 2.0], [1 - math.exp(-0.5), 1 - math.e]),
    }
    for name, (value, grad) in expected.items():
        logp.grad = None
        kl = kl_penalty(logp, ref, estimator=name)
        kl.sum().backward()
        assert_close(kl.detach(), torch.tensor([value], dtype=F64), EXACT)
        assert_close(logp.grad, torch.tensor([grad], dtype=F64), EXACT)


def test_k3_matches_issue_formula():
    logp = torch.tensor([[-0.3, -4.0, -1.0]], dtype=F64)
    ref = torch.tensor([[-1.3, -0.5, -1.0]], dtype=F64)
    x = ref - logp
    assert_close(kl_penalty(logp, ref, estimator="k3"), torch.exp(x) - x - 1, EXACT)


@pytest.mark.parametrize("name", KL_ESTIMATORS.names())
def test_every_estimator_zero_on_policy_and_padding_invariant(name):
    g = torch.Generator().manual_seed(0)
    logp = -torch.rand(3, 5, generator=g, dtype=F64) * 3
    ref = -torch.rand(3, 5, generator=g, dtype=F64) * 3
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0]])
    # zero when the policy equals the reference
    assert torch.count_nonzero(kl_penalty(logp, logp, estimator=name)) == 0

    # garbage on padding changes nothing, and gives no NaN gradient
    bad_logp = torch.where(mask.bool(), logp, torch.tensor(1e4, dtype=F64))
    bad_ref = torch.where(mask.bool(), ref, torch.tensor(-1e4, dtype=F64))
    a = logp.clone().requires_grad_(True)
    b = bad_logp.clone().requires_grad_(True)
    ka = kl_penalty(a, ref, estimator=name, mask=mask)
    kb = kl_penalty(b, bad_ref, estimator=name, mask=mask)
    ka.sum().backward()
    kb.sum().backward()
    assert_close(ka, kb, EXACT)
    assert torch.count_nonzero(ka[mask == 0]) == 0
    assert_close(a.grad, b.grad, EXACT)
    assert torch.isfinite(b.grad).all() and torch.count_nonzero(b.grad[mask == 0]) == 0
    if name in ("k2", "k3"):
        assert (ka >= 0).all()


def test_k1_and_k3_are_unbiased_k2_is_not():
    # tokens sampled from pi; E[k1] = E[k3] = KL(pi || ref) (Schulman 2020)
    pi = torch.tensor([0.5, 0.3, 0.2], dtype=F64)
    ref = torch.tensor([0.2, 0.3, 0.5], dtype=F64)
    kl_true = float((pi * (pi / ref).log()).sum())  # 0.2748872...
    g = torch.Generator().manual_seed(1)
    tokens = torch.multinomial(pi, 400_000, replacement=True, generator=g).view(1, -1)
    logp, ref_logp = pi.log()[tokens], ref.log()[tokens]
    k1 = kl_penalty(logp, ref_logp, estimator="k1").mean().item()
    k2 = kl_penalty(logp, ref_logp, estimator="k2").mean().item()
    k3 = kl_penalty(logp, ref_logp, estimator="k3").mean().item()
    assert abs(k1 - kl_true) < 5e-3
    assert abs(k3 - kl_true) < 5e-3
    # exact expectation of k2 under pi: 0.5 * E[d^2] = 0.29393..., biased upwards here
    k2_exact = float((pi * 0.5 * (pi / ref).log() ** 2).sum())
    assert abs(k2_exact - 0.29393) < 1e-4
    assert abs(k2 - k2_exact) < 5e-3 and k2 - kl_true > 0.01


def test_unknown_estimator():
    x = torch.zeros(1, 2)
    with pytest.raises(UnknownNameError, match="valid names: k1, k2, k3"):
        kl_penalty(x, x, estimator="k4")


def test_shape_mismatch_raises():
    with pytest.raises(ValueError, match="same"):
        kl_penalty(torch.zeros(2, 3), torch.zeros(2, 4))

"""The rollout/trainer mismatch: hand-computed weights, metrics and gradients of TIS and MIS."""

import math

import pytest
import torch
from tolerance import EXACT, assert_close

from ablate.errors import ConfigError
from ablate.rl import (
    ROLLOUT_CORRECTIONS,
    aggregate_loss,
    mismatch_metrics,
    policy_loss,
    rollout_correction_weights,
)

F64 = torch.float64

# w = exp(old - rollout) = [1, 3, 0.25, 1/1.5]; the last token is padding
OLD = torch.tensor([[-1.0, -2.0, -0.5, -3.0]], dtype=F64)
ROLLOUT = torch.tensor([[-1.0, -2.0 - math.log(3.0), -0.5 + math.log(4.0), -3.0 + math.log(1.5)]], dtype=F64)
MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0]], dtype=F64)


@pytest.mark.parametrize(("mode", "cap", "floor", "weights", "frac"), [
    ("none", 2.0, None, [1.0, 1.0, 1.0, 0.0], 0.0),
    ("tis", 2.0, None, [1.0, 2.0, 0.25, 0.0], 1 / 3),  # one-sided (Yao et al.): 3 -> 2
    ("tis", 2.0, 0.5, [1.0, 2.0, 0.5, 0.0], 2 / 3),  # two-sided (TRL clip_min): 0.25 -> 0.5
    ("mis", 2.0, None, [1.0, 0.0, 0.0, 0.0], 2 / 3),  # band [1/2, 2]: 3 and 0.25 masked
    ("mis", 5.0, 0.2, [1.0, 3.0, 0.25, 0.0], 0.0),  # band [0.2, 5]: the weights kept as they are
])
def test_hand_computed_weights(mode, cap, floor, weights, frac):
    w, metrics = rollout_correction_weights(OLD, ROLLOUT, MASK, mode=mode, cap=cap, floor=floor)
    assert_close(w, torch.tensor([weights], dtype=F64), EXACT)
    assert metrics["corrected_frac"] == pytest.approx(frac)
    assert not w.requires_grad


def test_hand_computed_mismatch_metrics():
    m = mismatch_metrics(OLD, ROLLOUT, MASK)
    # k3 = w - 1 - log w over the active tokens w = [1, 3, 0.25]
    k3 = [0.0, 2.0 - math.log(3.0), -0.75 + math.log(4.0)]
    assert m["kl"] == pytest.approx(sum(k3) / 3, abs=1e-12)
    assert m["max_ratio"] == pytest.approx(3.0, abs=1e-12)
    assert mismatch_metrics(OLD, OLD, MASK) == {"kl": 0.0, "max_ratio": 1.0}
    empty = mismatch_metrics(OLD, ROLLOUT, torch.zeros_like(MASK))
    assert math.isnan(empty["kl"]) and math.isnan(empty["max_ratio"])


@pytest.mark.parametrize(("mode", "weights"), [
    ("none", [1.0, 1.0, 1.0]), ("tis", [1.0, 2.0, 0.25]), ("mis", [1.0, 0.0, 0.0]),
])
def test_hand_computed_loss_and_gradient(mode, weights):
    """On-policy (logp = old) PPO with token-mean: loss = sum_t -A_t w_t / 3, d loss / d logp_t = -A_t w_t / 3."""
    adv = torch.tensor([[1.0, -2.0, 0.5, 7.0]], dtype=F64)
    logp = OLD.clone().requires_grad_(True)
    w, _ = rollout_correction_weights(OLD, ROLLOUT, MASK, mode=mode, cap=2.0)
    per_token, _ = policy_loss(logp, OLD, adv, MASK)
    loss = aggregate_loss(per_token * w, MASK, "token-mean")
    loss.backward()
    a, ww = [1.0, -2.0, 0.5], weights
    assert float(loss.detach()) == pytest.approx(sum(-x * y for x, y in zip(a, ww)) / 3, abs=1e-12)
    expected = [[-a[0] * ww[0] / 3, -a[1] * ww[1] / 3, -a[2] * ww[2] / 3, 0.0]]
    assert_close(logp.grad, torch.tensor(expected, dtype=F64), EXACT)


def _per_token_and_grad(logp0, old, adv, mask, w):
    """Per-token loss [B, T] times ``w`` and d(sum)/d logp [B, T] (each token's own contribution:
    with token ratios a token's loss depends on its own log-prob only)."""
    logp = logp0.clone().requires_grad_(True)
    per_token, _ = policy_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.2)
    out = per_token * w
    out.sum().backward()
    return out.detach(), logp.grad


def test_tis_changes_only_the_tokens_whose_weight_exceeds_the_cap():
    """Against untruncated importance sampling (no cap): TIS changes the loss and gradient of exactly the
    tokens with w > cap; under the cap each token's contribution is identical. Without mismatch
    (rollout = trainer) every mode is identical to no correction."""
    g = torch.Generator().manual_seed(0)
    B, T = 6, 9
    old = -torch.rand(B, T, generator=g, dtype=F64) * 3
    rollout = old + torch.randn(B, T, generator=g, dtype=F64)  # w = exp(old - rollout) spans ~[0.05, 20]
    logp = old + 0.3 * torch.randn(B, T, generator=g, dtype=F64)  # the policy has moved: r != 1
    adv = torch.randn(B, T, generator=g, dtype=F64)
    mask = (torch.rand(B, T, generator=g) < 0.8).to(F64)
    w_is, _ = rollout_correction_weights(old, rollout, mask, mode="tis", cap=1e9)
    w_tis, _ = rollout_correction_weights(old, rollout, mask, mode="tis", cap=2.0)
    over = (w_is > 2.0) & mask.bool()
    assert 0 < int(over.sum()) < int(mask.sum())
    loss_is, grad_is = _per_token_and_grad(logp, old, adv, mask, w_is)
    loss_tis, grad_tis = _per_token_and_grad(logp, old, adv, mask, w_tis)
    assert torch.equal(loss_is[~over], loss_tis[~over]) and torch.equal(grad_is[~over], grad_tis[~over])
    moved = over & (adv != 0) & (loss_is != 0)
    assert bool(moved.any())
    assert bool((loss_tis[moved] != loss_is[moved]).all())
    assert_close(loss_tis[over], loss_is[over] * 2.0 / w_is[over], EXACT)  # truncated to the cap
    reference = _per_token_and_grad(logp, old, adv, mask, mask)  # no correction: weight 1
    for mode in ROLLOUT_CORRECTIONS:
        w, metrics = rollout_correction_weights(old, old, mask, mode=mode, cap=2.0)
        got = _per_token_and_grad(logp, old, adv, mask, w)
        assert torch.equal(got[0], reference[0]) and torch.equal(got[1], reference[1]), mode
        assert metrics["corrected_frac"] == 0.0


@pytest.mark.parametrize("mode", ROLLOUT_CORRECTIONS)
def test_padding_is_ignored(mode):
    bad_old = torch.where(MASK.bool(), OLD, torch.tensor(1e4, dtype=F64))
    bad_rollout = torch.where(MASK.bool(), ROLLOUT, torch.tensor(-1e4, dtype=F64))
    a = rollout_correction_weights(OLD, ROLLOUT, MASK, mode=mode, cap=2.0)
    b = rollout_correction_weights(bad_old, bad_rollout, MASK, mode=mode, cap=2.0)
    assert torch.equal(a[0], b[0])  # padding is masked, not rounded: bit-equal
    assert a[1] == b[1]
    assert mismatch_metrics(OLD, ROLLOUT, MASK) == mismatch_metrics(bad_old, bad_rollout, MASK)


@pytest.mark.parametrize(("kwargs", "key"), [
    ({"mode": "tis", "cap": 1.0}, "rollout_correction_cap"),
    ({"mode": "mis", "cap": 0.5}, "rollout_correction_cap"),
    ({"mode": "tis", "cap": 2.0, "floor": 1.0}, "rollout_correction_floor"),
    ({"mode": "mis", "cap": 2.0, "floor": 0.0}, "rollout_correction_floor"),
    ({"mode": "token_truncate", "cap": 2.0}, "rollout_correction="),
])
def test_impossible_settings_raise_naming_the_key(kwargs, key):
    with pytest.raises(ConfigError, match=key):
        rollout_correction_weights(OLD, ROLLOUT, MASK, **kwargs)

import math

import pytest
import torch
from tolerance import EXACT, assert_close, is_close

from ablate.errors import ConfigError, UnknownNameError
from ablate.registry import ALL_REGISTRIES
from ablate.rl import (
    AGGREGATIONS,
    RATIO_LEVELS,
    SURROGATES,
    aggregate_loss,
    effective_normalizer,
    policy_loss,
    row_signs,
    step_totals,
    value_loss,
)
from ablate.rl.losses import NORMALIZERS

F64 = torch.float64
METRIC_KEYS = {"clip_frac_low", "clip_frac_high", "dual_clip_frac", "ratio_mean", "ratio_max", "approx_kl"}


def t(x) -> torch.Tensor:
    return torch.tensor(x, dtype=F64)


def token_case(ratios, advantages, **kwargs):
    """One sequence, old_logp = 0, logp = log(ratio): per-token loss, d(sum loss)/d logp, metrics."""
    logp = t([ratios]).log().requires_grad_(True)
    per_token, metrics = policy_loss(
        logp, torch.zeros_like(logp), t([advantages]), torch.ones_like(logp), **kwargs
    )
    per_token.sum().backward()
    return per_token.detach()[0], logp.grad[0], metrics


def close(actual, expected):
    """float64 against a hand-computed value."""
    assert_close(actual, t(expected), EXACT)


def random_batch(seed: int, batch: int = 6, width: int = 7):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, width + 1, (batch,), generator=g)
    mask = (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).to(F64)
    old = -torch.rand(batch, width, generator=g, dtype=F64) * 3
    logp = old + 0.4 * torch.randn(batch, width, generator=g, dtype=F64)
    adv = torch.randn(batch, width, generator=g, dtype=F64)
    return logp, old, adv, mask


# --------------------------------------------------------------------------------------------------
# registries


def test_registry_kinds_and_names():
    assert ALL_REGISTRIES["ratio level"] is RATIO_LEVELS
    assert ALL_REGISTRIES["policy loss surrogate"] is SURROGATES
    assert ALL_REGISTRIES["loss aggregation"] is AGGREGATIONS
    assert RATIO_LEVELS.names() == ["token", "sequence", "sequence_token"]
    assert SURROGATES.names() == ["ppo", "cispo", "sapo"]
    assert AGGREGATIONS.names() == [
        "token-mean",
        "seq-mean-token-mean",
        "seq-mean-token-sum",
        "seq-mean-token-sum-norm",
        "prompt-mean",
        "balanced-mean",
    ]


def test_unknown_names_raise():
    x = torch.zeros(1, 2)
    with pytest.raises(UnknownNameError, match="did you mean 'sequence_token'"):
        policy_loss(x, x, x, x + 1, ratio_level="sequence-token")
    with pytest.raises(UnknownNameError, match="valid names: ppo, cispo, sapo"):
        policy_loss(x, x, x, x + 1, surrogate="grpo")
    with pytest.raises(UnknownNameError, match="did you mean 'token-mean'"):
        aggregate_loss(x, x + 1, "token_mean")


# --------------------------------------------------------------------------------------------------
# PPO, hand-computed


def test_ppo_token_clipping_values_and_gradients():
    # (A, r): in band, clip binds favourably (A>0 r>1.2), in band, binds favourably (A<0 r<0.8),
    # unfavourable (A>0 r<0.8), unfavourable (A<0 r>1.2)
    ratios = [1.1, 1.5, 0.9, 0.5, 0.5, 1.5]
    adv = [1.0, 1.0, -1.0, -1.0, 1.0, -1.0]
    loss, grad, metrics = token_case(ratios, adv)
    close(loss, [-1.1, -1.2, 0.9, 0.8, -0.5, 1.5])
    # d/dlogp of -A*r is -A*r; 0 where the clip binds in the favourable direction (torch.max picks
    # the constant clipped loss); the unfavourable side keeps its gradient (pessimistic bound)
    close(grad, [-1.1, 0.0, 0.9, 0.0, -0.5, 1.5])
    assert set(metrics) == METRIC_KEYS and all(isinstance(v, float) for v in metrics.values())
    assert metrics["clip_frac_high"] == pytest.approx(1 / 6)
    assert metrics["clip_frac_low"] == pytest.approx(1 / 6)
    assert metrics["dual_clip_frac"] == 0.0
    assert metrics["ratio_mean"] == pytest.approx(sum(ratios) / 6)
    assert metrics["ratio_max"] == pytest.approx(1.5)
    assert metrics["approx_kl"] == pytest.approx(sum(r - 1 - math.log(r) for r in ratios) / 6)


def test_min_instead_of_max_would_be_wrong():
    # the favourable-clip case: torch.min of the losses would keep the unclipped -A*r and its gradient
    _, grad, _ = token_case([1.5], [1.0])
    assert grad.item() == 0.0
    r = t([1.5]).requires_grad_(True)
    torch.minimum(-1.0 * r, -1.0 * r.clamp(0.8, 1.2)).sum().backward()
    assert r.grad.item() == -1.0


def test_clip_higher_is_asymmetric():
    # DAPO clip-higher: r = 1.25 with A > 0 is clipped by 0.2 but not by 0.28; r = 0.75, A < 0 by both
    _, grad_sym, m_sym = token_case([1.25, 0.75], [1.0, -1.0], clip_low=0.2, clip_high=0.2)
    _, grad_high, m_high = token_case([1.25, 0.75], [1.0, -1.0], clip_low=0.2, clip_high=0.28)
    close(grad_sym, [0.0, 0.0])
    close(grad_high, [-1.25, 0.0])
    assert (m_sym["clip_frac_high"], m_high["clip_frac_high"]) == (0.5, 0.0)
    assert m_high["clip_frac_low"] == 0.5


def test_dual_clip():
    ratios = [4.0, 2.0, 4.0, 0.5]
    adv = [-1.0, -1.0, 1.0, -2.0]
    loss, grad, metrics = token_case(ratios, adv, dual_clip=3.0)
    # A<0, r=4: max(4, 1.2) = 4 capped at 3 (grad 0); r=2 below the cap: 2 (grad 2);
    # A>0 untouched by the dual clip: -1.2 (grad 0); A=-2, r=0.5: max(1.0, 1.6) = 1.6 (grad 0)
    close(loss, [3.0, 2.0, -1.2, 1.6])
    close(grad, [0.0, 2.0, 0.0, 0.0])
    assert metrics["dual_clip_frac"] == 0.25
    loss_plain, grad_plain, _ = token_case(ratios, adv)
    close(loss_plain, [4.0, 2.0, -1.2, 1.6])
    close(grad_plain, [4.0, 2.0, 0.0, 0.0])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"dual_clip": 1.0}, "dual_clip=1.0 must be > 1"),
        ({"dual_clip": 3.0, "surrogate": "sapo"}, "applies to surrogate 'ppo' only"),
        ({"clip_low": 1.0}, "clip_low=1.0"),
        ({"clip_high": -0.1}, "clip_high=-0.1"),
        ({"surrogate": "sapo", "tau_neg": 0.0}, "tau_neg=0.0"),
    ],
)
def test_impossible_constants_raise_config_error(kwargs, match):
    x = torch.zeros(1, 2)
    with pytest.raises(ConfigError, match=match):
        policy_loss(x, x, x, x + 1, **kwargs)


# --------------------------------------------------------------------------------------------------
# CISPO and SAPO, hand-computed


def test_cispo_keeps_gradient_of_clipped_tokens():
    loss, grad, metrics = token_case([1.1, 1.5, 0.5], [1.0, 1.0, -1.0], surrogate="cispo")
    # weight sg(min(r, 1.2)) = [1.1, 1.2, 0.5]; loss -w * A * log r; gradient -w * A (never 0)
    w = [1.1, 1.2, 0.5]
    close(loss, [-w[0] * math.log(1.1), -w[1] * math.log(1.5), w[2] * math.log(0.5)])
    close(grad, [-1.1, -1.2, 0.5])
    assert metrics["clip_frac_high"] == pytest.approx(1 / 3) and metrics["clip_frac_low"] == 0.0
    # same gradient as MiniMax-M1's form -sg(w) * A * logp
    logp = t([[math.log(1.1) - 2, math.log(1.5) - 1, math.log(0.5) - 3]]).requires_grad_(True)
    old = t([[-2.0, -1.0, -3.0]])
    per_token, _ = policy_loss(logp, old, t([[1.0, 1.0, -1.0]]), torch.ones_like(old), surrogate="cispo")
    per_token.sum().backward()
    paper = logp.detach().clone().requires_grad_(True)
    (-(t([w]) * t([[1.0, 1.0, -1.0]]) * paper).sum()).backward()
    assert_close(logp.grad, paper.grad, EXACT)


def test_cispo_lower_bound():
    _, grad, metrics = token_case([0.5, 1.0], [-1.0, 1.0], surrogate="cispo", cispo_lower_bound=True)
    close(grad, [0.8, -1.0])  # weight of r = 0.5 raised to 1 - clip_low = 0.8
    assert metrics["clip_frac_low"] == 0.5


def test_sapo_soft_gate():
    # f(r) = sigmoid(tau (r - 1)) * 4 / tau; loss -f(r) A; d/dlogp = -A f'(r) r, f' = 4 s (1 - s)
    ratios = [1.0, 1.0, 2.0, 2.0, 5.0]
    adv = [1.0, -1.0, 1.0, -1.0, 1.0]
    loss, grad, metrics = token_case(ratios, adv, surrogate="sapo")

    def sig(x):
        return 1 / (1 + math.exp(-x))

    s_neg = sig(1.05)  # tau_neg (r - 1) at r = 2
    close(
        loss,
        [-2.0, 2.0 / 1.05, -4 * sig(1.0), 4 / 1.05 * s_neg, -4 * sig(4.0)],
    )
    close(
        grad,
        [
            -1.0,  # on-policy: the plain policy gradient -A, for both signs
            1.0,
            -4 * 0.7310585786300049 * 0.2689414213699951 * 2,  # = -1.57289546...
            4 * s_neg * (1 - s_neg) * 2,
            -4 * sig(4.0) * (1 - sig(4.0)) * 5,  # far off-policy: small, not 0
        ],
    )
    assert 0 < -grad[4] < 0.36
    assert metrics["clip_frac_low"] == metrics["clip_frac_high"] == 0.0


# --------------------------------------------------------------------------------------------------
# ratio levels


def test_sequence_ratio_hand_computed():
    logp = t([[0.1, 0.3, 0.0], [-0.1, 0.0, 0.1]]).requires_grad_(True)
    mask = t([[1, 1, 0], [1, 1, 1]])
    adv = t([[1.0, 1.0, 0.0], [-1.0, -1.0, -1.0]])
    per_token, metrics = policy_loss(logp, torch.zeros_like(logp), adv, mask, ratio_level="sequence")
    per_token.sum().backward()
    s0 = math.exp(0.2)  # 1.2214 > 1.2: clipped, A > 0: loss -1.2 per token, no gradient
    close(per_token.detach(), [[-1.2, -1.2, 0.0], [1.0, 1.0, 1.0]])
    # sequence 1: s = 1, sum_t -A s = 3 s, ds/dlogp_k = s / 3 -> gradient 1 per token
    close(logp.grad, [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    assert metrics["clip_frac_high"] == 0.5  # one of two sequences
    assert metrics["ratio_mean"] == pytest.approx((s0 + 1) / 2)
    assert metrics["ratio_max"] == pytest.approx(s0)
    assert metrics["approx_kl"] == pytest.approx(
        sum(math.exp(x) - 1 - x for x in (0.1, 0.3, -0.1, 0.0, 0.1)) / 5
    )


@pytest.mark.parametrize("surrogate", SURROGATES.names())
def test_sequence_and_sequence_token_values_and_gradients(surrogate):
    logp, old, adv_tok, mask = random_batch(3)
    adv_seq = adv_tok[:, :1].expand_as(adv_tok).clone()  # constant within each sequence
    results = {}
    for level in ("sequence", "sequence_token"):
        for kind, adv in (("seq", adv_seq), ("tok", adv_tok)):
            x = logp.clone().requires_grad_(True)
            per_token, metrics = policy_loss(x, old, adv, mask, ratio_level=level, surrogate=surrogate)
            aggregate_loss(per_token, mask, "seq-mean-token-mean").backward()
            results[level, kind] = (per_token.detach(), x.grad, metrics)
    for kind in ("seq", "tok"):  # equal values always
        assert_close(results["sequence", kind][0], results["sequence_token", kind][0], EXACT)
        assert results["sequence", kind][2] == pytest.approx(results["sequence_token", kind][2])
    # equal gradients with per-sequence advantages (GSPO's claim), different with per-token ones
    assert_close(results["sequence", "seq"][1], results["sequence_token", "seq"][1], EXACT)
    assert not is_close(results["sequence", "tok"][1], results["sequence_token", "tok"][1], EXACT)
    # the sequence-level gradient is the same on every token of a sequence; GSPO-token's is not
    g_seq, g_tok = results["sequence", "tok"][1], results["sequence_token", "tok"][1]
    row = 0 if mask[0].sum() > 1 else int(mask.sum(-1).argmax())
    n = int(mask[row].sum())
    assert_close(g_seq[row, :n], g_seq[row, :1].expand(n), EXACT)
    assert not is_close(g_tok[row, :n], g_tok[row, :1].expand(n), EXACT)


@pytest.mark.parametrize("surrogate", SURROGATES.names())
@pytest.mark.parametrize("level", RATIO_LEVELS.names())
def test_padding_invariance(level, surrogate):
    logp, old, adv, mask = random_batch(5)
    pad = mask == 0
    big = t(1e4)
    garbage = (
        torch.where(pad, big, logp),
        torch.where(pad, -big, old),
        torch.where(pad, big, adv),
    )
    # also two extra padding columns and one all-padding row
    wide = [torch.cat([x, torch.full((x.shape[0], 2), -1e4, dtype=F64)], dim=1) for x in (logp, old, adv)]
    wide = [torch.cat([x, torch.full((1, x.shape[1]), 1e4, dtype=F64)], dim=0) for x in wide]
    wide_mask = torch.zeros(mask.shape[0] + 1, mask.shape[1] + 2, dtype=F64)
    wide_mask[: mask.shape[0], : mask.shape[1]] = mask
    outputs = []
    for (lp, o, a), m in (((logp, old, adv), mask), (garbage, mask), (wide, wide_mask)):
        x = lp.clone().requires_grad_(True)
        per_token, metrics = policy_loss(x, o, a, m, ratio_level=level, surrogate=surrogate)
        aggregate_loss(per_token, m, "token-mean").backward()
        assert torch.count_nonzero(per_token[m == 0]) == 0
        assert torch.isfinite(x.grad).all() and torch.count_nonzero(x.grad[m == 0]) == 0
        rows, cols = mask.shape
        outputs.append((per_token.detach()[:rows, :cols], x.grad[:rows, :cols], metrics))
    for per_token, grad, metrics in outputs[1:]:
        assert_close(per_token, outputs[0][0], EXACT)
        assert_close(grad, outputs[0][1], EXACT)
        assert metrics == pytest.approx(outputs[0][2])


@pytest.mark.parametrize("surrogate", SURROGATES.names())
@pytest.mark.parametrize("level", RATIO_LEVELS.names())
def test_on_policy_every_level_and_surrogate_gives_the_policy_gradient(level, surrogate):
    # at logp == old_logp and advantages constant per sequence, d(sum of per-token loss)/d logp = -A
    _, old, adv, mask = random_batch(7)
    adv = adv[:, :1].expand_as(adv) * mask
    x = old.clone().requires_grad_(True)
    per_token, metrics = policy_loss(x, old, adv, mask, ratio_level=level, surrogate=surrogate)
    per_token.sum().backward()
    assert_close(x.grad, -adv, EXACT)
    assert set(metrics) == METRIC_KEYS
    assert metrics["ratio_mean"] == metrics["ratio_max"] == 1.0
    assert metrics["approx_kl"] == 0.0 and metrics["clip_frac_high"] == metrics["clip_frac_low"] == 0.0


def test_empty_mask_gives_zero_loss_and_nan_metrics():
    x = torch.zeros(2, 3, dtype=F64, requires_grad=True)
    per_token, metrics = policy_loss(x, x.detach(), torch.ones(2, 3), torch.zeros(2, 3))
    assert torch.count_nonzero(per_token) == 0
    assert all(math.isnan(v) for v in metrics.values())
    for mode in AGGREGATIONS.names():
        loss = aggregate_loss(per_token, torch.zeros(2, 3), mode, group_ids=torch.tensor([0, 0]), max_len=4,
                              signs=torch.tensor([1.0, -1.0]))
        assert loss.item() == 0.0


# --------------------------------------------------------------------------------------------------
# aggregation

AGG_L = [[1.0, 2.0, 3.0, 0.0], [4.0, 0.0, 0.0, 0.0], [5.0, 6.0, 0.0, 0.0]]
AGG_MASK = [[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 0, 0]]
AGG_EXPECTED = {
    "token-mean": 21 / 6,  # all 6 tokens weigh the same
    "seq-mean-token-mean": (2 + 4 + 5.5) / 3,  # per-sequence means, averaged
    "seq-mean-token-sum": (6 + 4 + 11) / 3,
    "seq-mean-token-sum-norm": 21 / 5 / 3,  # max_len = 5, not the padded width 4
    "prompt-mean": ((6 + 4) / 4 + 11 / 2) / 2,  # groups [0, 0, 1]: 2.5 and 5.5
    # advantage signs [+, -, +]: group 0 = 1/2 (6 / 3) + 1/2 (4 / 1) = 3, group 1 = 1 (11 / 2) = 5.5
    "balanced-mean": (3 + 5.5) / 2,
}
AGG_SIGNS = torch.tensor([1.0, -1.0, 1.0])


def test_every_aggregation_has_a_hand_computed_value():
    assert set(AGG_EXPECTED) == set(AGGREGATIONS.names())


@pytest.mark.parametrize("mode", AGGREGATIONS.names())
def test_aggregation_hand_computed(mode):
    mask = t(AGG_MASK)
    per_token = torch.where(mask.bool(), t(AGG_L), t(1e4))  # garbage on padding is ignored
    loss = aggregate_loss(per_token, mask, mode, group_ids=torch.tensor([0, 0, 1]), max_len=5, signs=AGG_SIGNS)
    assert loss.item() == pytest.approx(AGG_EXPECTED[mode], abs=1e-12)


def test_short_and_long_sequence_weights():
    # the notes: sequence-normalized gives each completion equal weight, token-normalized each token.
    # on-policy, A = 1: short sequence of 1 token, long one of 4; gradient of the loss on each token
    mask = t([[1, 0, 0, 0], [1, 1, 1, 1]])
    adv = mask.clone()
    grads = {}
    for mode in AGGREGATIONS.names():
        x = torch.zeros(2, 4, dtype=F64, requires_grad=True)
        per_token, _ = policy_loss(x, x.detach(), adv, mask)
        aggregate_loss(per_token, mask, mode, group_ids=torch.tensor([0, 1]), max_len=8,
                       signs=torch.tensor([1.0, 1.0])).backward()
        grads[mode] = x.grad
    close(grads["token-mean"], [[-0.2, 0, 0, 0], [-0.2] * 4])  # 1/5 per token: long seq gets 4/5
    close(grads["seq-mean-token-mean"], [[-0.5, 0, 0, 0], [-0.125] * 4])  # 1/2 per sequence
    close(grads["seq-mean-token-sum"], [[-0.5, 0, 0, 0], [-0.5] * 4])
    close(grads["seq-mean-token-sum-norm"], [[-1 / 16, 0, 0, 0], [-1 / 16] * 4])
    close(grads["prompt-mean"], [[-0.5, 0, 0, 0], [-0.125] * 4])  # one sequence per prompt
    close(grads["balanced-mean"], [[-0.5, 0, 0, 0], [-0.125] * 4])  # one positive sequence per prompt
    # per-sequence totals of the gradient: the token mean gives the long sequence 4x the weight
    tm, sm = grads["token-mean"].sum(-1), grads["seq-mean-token-mean"].sum(-1)
    assert tm[1] / tm[0] == pytest.approx(4.0) and sm[1] / sm[0] == pytest.approx(1.0)


def test_prompt_mean_differs_from_token_mean_across_groups():
    # group 0 has 4 tokens, group 1 has 2: prompt-mean gives each group half the weight
    mask = t([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 0, 0]])
    x = torch.zeros(3, 4, dtype=F64, requires_grad=True)
    per_token, _ = policy_loss(x, x.detach(), mask.clone(), mask)
    aggregate_loss(per_token, mask, "prompt-mean", group_ids=torch.tensor([5, 5, 2])).backward()
    close(x.grad, [[-1 / 8] * 3 + [0], [-1 / 8, 0, 0, 0], [-1 / 4, -1 / 4, 0, 0]])


def _accumulation_batch():
    g = torch.Generator().manual_seed(11)
    batch, width = 10, 9
    lengths = torch.randint(1, width + 1, (batch,), generator=g)
    lengths[3] = 0  # an empty completion
    mask = (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).to(F64)
    old = -torch.rand(batch, width, generator=g, dtype=F64) * 2
    logp = old + 0.3 * torch.randn(batch, width, generator=g, dtype=F64)
    adv = torch.randn(batch, 1, generator=g, dtype=F64).expand(batch, width).clone()
    group_ids = torch.tensor([4, 1, 4, 1, 9, 4, 1, 9, 2, 4])  # uneven groups, split across micro-batches
    micro = [torch.tensor([0, 7, 3]), torch.tensor([5, 1]), torch.tensor([9, 2, 6, 8, 4])]
    return logp, old, adv, mask, group_ids, micro


@pytest.mark.parametrize("level", RATIO_LEVELS.names())
@pytest.mark.parametrize("mode", AGGREGATIONS.names())
def test_micro_batch_accumulation_equals_full_batch(mode, level):
    logp, old, adv, mask, group_ids, micro = _accumulation_batch()
    kw = {"ratio_level": level, "clip_high": 0.28}
    full_x = logp.clone().requires_grad_(True)
    per_token, _ = policy_loss(full_x, old, adv, mask, **kw)
    signs = torch.sign(adv[:, 0])
    full = aggregate_loss(per_token, mask, mode, group_ids=group_ids, max_len=12, signs=signs)
    full.backward()

    totals = step_totals(mask, group_ids, signs)
    x = logp.clone().requires_grad_(True)
    accumulated = 0.0
    for rows in micro:
        per_token, _ = policy_loss(x[rows], old[rows], adv[rows], mask[rows], **kw)
        loss = aggregate_loss(
            per_token, mask[rows], mode, group_ids=group_ids[rows], max_len=12, **totals.for_rows(rows)
        )
        loss.backward()
        accumulated += loss.item()
    assert accumulated == pytest.approx(full.item(), abs=1e-9)
    assert_close(x.grad, full_x.grad, EXACT)
    assert full_x.grad.abs().sum() > 0.1


def test_without_step_totals_micro_batches_do_not_add_up():
    # the bug the totals prevent: each micro-batch normalizing by its own token count
    logp, old, adv, mask, group_ids, micro = _accumulation_batch()
    per_token, _ = policy_loss(logp, old, adv, mask)
    full = aggregate_loss(per_token, mask, "token-mean").item()
    naive = sum(aggregate_loss(per_token[r], mask[r], "token-mean").item() for r in micro) / len(micro)
    assert abs(naive - full) > 1e-3


def test_step_totals_values():
    mask = t([[1, 1, 1, 0], [0, 0, 0, 0], [1, 1, 0, 0], [1, 0, 0, 0]])
    totals = step_totals(mask, torch.tensor([3, 3, 8, 3]))
    assert (totals.num_tokens, totals.num_seqs, totals.num_groups) == (6, 3, 2)
    assert totals.group_num_tokens.tolist() == [4, 4, 2, 4]
    kw = totals.for_rows(slice(2, 4))
    assert kw["group_num_tokens"].tolist() == [2, 4] and kw["num_groups"] == 2
    assert set(step_totals(mask).for_rows()) == {"num_tokens", "num_seqs"}


def test_aggregation_errors():
    mask = t(AGG_MASK)
    per_token = t(AGG_L)
    with pytest.raises(ConfigError, match="needs max_len"):
        aggregate_loss(per_token, mask, "seq-mean-token-sum-norm")
    with pytest.raises(ConfigError, match="max_len=2 is shorter than a completion of 3"):
        aggregate_loss(per_token, mask, "seq-mean-token-sum-norm", max_len=2)
    with pytest.raises(ConfigError, match="needs group_ids"):
        aggregate_loss(per_token, mask, "prompt-mean")
    with pytest.raises(ValueError, match="both num_groups and group_num_tokens"):
        aggregate_loss(per_token, mask, "prompt-mean", group_ids=torch.tensor([0, 0, 1]), num_groups=2)


# --------------------------------------------------------------------------------------------------
# value loss


def test_value_loss_hand_computed():
    values = t([[1.0, 2.0, 0.0, 7.0]]).requires_grad_(True)
    old = t([[0.5, 0.5, 0.5, -1e4]])
    returns = t([[0.0, 2.5, 1.0, 1e4]])
    mask = t([[1, 1, 1, 0]])
    vf = value_loss(values, old, returns, mask, clip=0.2)
    vf.sum().backward()
    # token 0: unclipped 1.0 beats clipped (0.7)^2: 0.5, grad v - R = 1
    # token 1: v_clip = 0.7, (0.7 - 2.5)^2 = 3.24 beats 0.25: 1.62, and v_clip is clamped: grad 0
    # token 2: v_clip = 0.3, unclipped 1.0 beats 0.49: 0.5, grad -1
    close(vf.detach(), [[0.5, 1.62, 0.5, 0.0]])
    close(values.grad, [[1.0, 0.0, -1.0, 0.0]])
    values.grad = None
    plain = value_loss(values, old, returns, mask)
    plain.sum().backward()
    close(plain.detach(), [[0.5, 0.125, 0.5, 0.0]])
    close(values.grad, [[1.0, -0.5, -1.0, 0.0]])


def test_value_clip_must_be_positive():
    x = torch.zeros(1, 2)
    with pytest.raises(ConfigError, match="value clip=0"):
        value_loss(x, x, x, x + 1, clip=0)


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"loss.ratio_level": "sequence", "loss.clip_low": 3e-4, "loss.clip_high": 4e-4},
        {"loss.surrogate": "cispo", "loss.cispo_lower_bound": True, "loss.clip_high": 0.28},
        {"loss.surrogate": "sapo", "loss.sapo_tau_pos": 0.8, "loss.sapo_tau_neg": 1.2},
        {"loss.dual_clip": 3.0},
    ],
)
def test_policy_loss_from_config_is_policy_loss_with_the_loss_section(overrides):
    from ablate.config import TrialConfig
    from ablate.rl import policy_loss_from_config

    loss = TrialConfig.from_overrides(overrides).loss
    logp, old_logp, adv, mask = random_batch(3)
    a, ma = policy_loss_from_config(logp, old_logp, adv, mask, loss)
    b, mb = policy_loss(
        logp, old_logp, adv, mask, ratio_level=loss.ratio_level, surrogate=loss.surrogate,
        clip_low=loss.clip_low, clip_high=loss.clip_high, dual_clip=loss.dual_clip, tau_pos=loss.sapo_tau_pos,
        tau_neg=loss.sapo_tau_neg, cispo_lower_bound=loss.cispo_lower_bound,
    )
    assert torch.equal(a, b)
    assert ma.keys() == mb.keys() and all(ma[k] == mb[k] or (math.isnan(ma[k]) and math.isnan(mb[k])) for k in ma)


# --------------------------------------------------------------------------------------------------
# a sequence-level loss under each aggregation (the config's GSPO warning, huggingface/trl#3823)


@pytest.mark.parametrize("mode", AGGREGATIONS.names())
def test_only_seq_mean_token_mean_averages_a_sequence_level_loss_per_sequence(mode):
    """A sequence ratio's loss l_i is repeated on each of its tokens; GSPO's objective is mean_i l_i."""
    from ablate.config.rules import LENGTH_WEIGHTED_AGGREGATIONS

    mask = torch.tensor([[1, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)  # lengths 1 and 4, one prompt
    per_token = torch.where(mask, torch.tensor([[1.0], [-1.0]]), torch.tensor(0.0))  # l = [1, -1]
    loss = aggregate_loss(per_token, mask, mode, group_ids=torch.tensor([0, 0]), max_len=4,
                          signs=torch.tensor([1.0, 1.0]))  # both advantages positive: one subset
    # length-weighted: token-mean and prompt-mean (1 - 4) / 5, seq-mean-token-sum (1 - 4) / 2,
    # seq-mean-token-sum-norm (1 - 4) / 4 / 2; the per-sequence mean is 0
    expected = {"seq-mean-token-mean": 0.0, "token-mean": -0.6, "prompt-mean": -0.6, "seq-mean-token-sum": -1.5,
                "seq-mean-token-sum-norm": -0.375, "balanced-mean": -0.6}
    assert loss.item() == pytest.approx(expected[mode])
    assert (mode in LENGTH_WEIGHTED_AGGREGATIONS) == (mode != "seq-mean-token-mean")


# ------------------------------------------------------------------ the normalizer and token weights


def test_effective_normalizer_values():
    mask = t([[1, 1, 1, 0], [0, 0, 0, 0], [1, 1, 0, 0], [1, 0, 0, 0]])
    totals = step_totals(mask, torch.tensor([3, 3, 8, 3]))
    assert effective_normalizer("token-mean", totals) == 6.0
    assert effective_normalizer("seq-mean-token-mean", totals) == 3.0
    assert effective_normalizer("seq-mean-token-sum", totals) == 3.0
    assert effective_normalizer("seq-mean-token-sum-norm", totals, max_len=16) == 48.0
    assert math.isnan(effective_normalizer("seq-mean-token-sum-norm", totals))
    assert effective_normalizer("prompt-mean", totals) == 2.0
    assert effective_normalizer("balanced-mean", totals) == 1.0  # no signs given: no balanced group, clamped
    signed = step_totals(mask, torch.tensor([3, 3, 8, 3]), torch.tensor([1.0, 0.0, -1.0, 0.0]))
    assert effective_normalizer("balanced-mean", signed) == 2.0
    assert math.isnan(effective_normalizer("a-plugin-mode", totals))
    assert set(NORMALIZERS) == set(AGGREGATIONS.names())  # every built-in mode says what it divides by


def _declared_weights(mode, mask, group_ids, max_len, signs):
    """d loss / d L_it of every token over a whole step, from each mode's definition (written out here,
    independently of the implementation): token-mean 1/N; seq-mean-token-mean 1/(len_i S);
    seq-mean-token-sum 1/S; seq-mean-token-sum-norm 1/(max_len S); prompt-mean 1/(n_g G);
    balanced-mean (n_s / (n+ + n-)) / T_s / G_bal for a row of sign s in its group (0 for sign 0)."""
    m = mask.bool()
    bal = {}
    for g in group_ids.unique().tolist():
        rows = [i for i in range(mask.shape[0]) if int(group_ids[i]) == g and bool(m[i].any())]
        pos = [i for i in rows if signs[i] > 0]
        neg = [i for i in rows if signs[i] < 0]
        for side in (pos, neg):
            tokens = sum(int(m[i].sum()) for i in side)
            for i in side:
                bal[i] = len(side) / (len(pos) + len(neg)) / tokens
    n_bal = sum(1 for g in group_ids.unique().tolist()
                if any(int(group_ids[i]) == g and bool(m[i].any()) and signs[i] != 0 for i in range(mask.shape[0])))
    lens = m.sum(1)
    n_tok, n_seq = int(m.sum()), int((lens > 0).sum())
    group_tok = {int(g): int(m[group_ids == g].sum()) for g in group_ids.unique()}
    n_groups = sum(1 for v in group_tok.values() if v > 0)
    w = torch.zeros(mask.shape, dtype=F64)
    for i in range(mask.shape[0]):
        for j in range(mask.shape[1]):
            if not m[i, j]:
                continue
            w[i, j] = {
                "token-mean": 1 / n_tok,
                "seq-mean-token-mean": 1 / (int(lens[i]) * n_seq),
                "seq-mean-token-sum": 1 / n_seq,
                "seq-mean-token-sum-norm": 1 / (max_len * n_seq),
                "prompt-mean": 1 / (group_tok[int(group_ids[i])] * n_groups),
                "balanced-mean": bal.get(i, 0.0) / n_bal,
            }[mode]
    return w


@pytest.mark.parametrize("mode", sorted(NORMALIZERS))
def test_every_token_gets_its_declared_weight_however_the_step_is_split(mode):
    """The property behind exact accumulation: with the loss L_it = x_it, each active token's gradient
    is the weight its mode declares, for every random split of the step into micro-batches (rows in
    any order, groups cut across micro-batches), and 0 on padding."""
    _, _, adv, mask, group_ids, _ = _accumulation_batch()
    signs = torch.sign(adv[:, 0])
    signs[1] = 0.0  # a zero advantage: in neither subset
    declared = _declared_weights(mode, mask, group_ids, 12, signs)
    totals = step_totals(mask, group_ids, signs)
    g = torch.Generator().manual_seed(5)
    for _ in range(20):
        perm = torch.randperm(mask.shape[0], generator=g)
        cuts = sorted(torch.randperm(mask.shape[0] - 1, generator=g)[: int(torch.randint(0, 5, (1,), generator=g))]
                      .add(1).tolist())
        x = torch.zeros(mask.shape, dtype=F64, requires_grad=True)
        for rows in torch.tensor_split(perm, cuts):
            aggregate_loss(x[rows], mask[rows], mode, group_ids=group_ids[rows], max_len=12,
                           **totals.for_rows(rows)).backward()
        assert_close(x.grad, declared, EXACT)


def test_luspo_is_a_sequence_ratio_with_seq_mean_token_sum():
    """LUSPO (arXiv 2602.05261) as TRL writes it (grpo_trainer.py, loss_type="luspo"):
    s_i = exp(sum_t m (logp - old) / |o_i|), l_i = -min(s_i A_i, clip(s_i, 1 - e_low, 1 + e_high) A_i),
    loss = mean_i |o_i| l_i; here ratio_level=sequence with seq-mean-token-sum, values and gradients."""
    mask = t([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]])
    old = torch.tensor([[-1.0, -0.5, -2.0, 0.0], [-0.3, 0.0, 0.0, 0.0], [-1.2, -0.7, -0.1, -0.9]], dtype=F64)
    delta = torch.tensor([[0.002, -0.001, 0.004, 9.0], [0.01, 9.0, 9.0, 9.0], [-0.003, 0.0, 0.001, 0.0]], dtype=F64)
    adv = torch.tensor([[1.0], [-2.0], [0.5]], dtype=F64).expand(3, 4).clone()
    lo, hi = 2e-3, 2.5e-3

    x = (old + delta).requires_grad_(True)
    lens = mask.sum(1)
    s = torch.exp(((x - old) * mask).sum(1) / lens)
    a = adv[:, 0]
    ell = -torch.minimum(s * a, torch.clamp(s, 1 - lo, 1 + hi) * a)
    expected = (lens * ell).mean()
    expected.backward()
    by_hand = x.grad.clone()

    y = (old + delta).requires_grad_(True)
    per_token, _ = policy_loss(y, old, adv, mask, ratio_level="sequence", clip_low=lo, clip_high=hi)
    loss = aggregate_loss(per_token, mask, "seq-mean-token-sum")
    loss.backward()
    assert loss.item() == pytest.approx(expected.item(), abs=1e-12)
    assert_close(y.grad, by_hand, EXACT)
    assert float((s.detach() - 1).abs().max()) > hi  # some sequence is clipped: the test covers both branches


def test_balanced_mean_by_hand_value_and_gradient():
    """One group: rows of advantage sign +, +, -, 0 with lengths 2, 1, 3, 1 and per-token losses [1, 2],
    [3], [1, 1, 1], [5]. n+ = 2, n- = 1: L = 2/3 mean(1, 2, 3) + 1/3 mean(1, 1, 1) = 4/3 + 1/3 = 5/3; a
    second group whose rows all have advantage 0 is left out of the mean over groups. d L / d L_it:
    2/3 / 3 = 2/9 on the positive rows' tokens, 1/3 / 3 = 1/9 on the negative row's, 0 on the zero row."""
    mask = t([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 0, 0], [1, 1, 0]])
    values = t([[1, 2, 0], [3, 0, 0], [1, 1, 1], [5, 0, 0], [7, 7, 0]]).requires_grad_(True)
    signs = torch.tensor([1.0, 1.0, -1.0, 0.0, 0.0])
    loss = aggregate_loss(values, mask, "balanced-mean", group_ids=torch.tensor([0, 0, 0, 0, 1]), signs=signs)
    assert loss.item() == pytest.approx(5 / 3, abs=1e-12)
    loss.backward()
    close(values.grad, [[2 / 9, 2 / 9, 0], [2 / 9, 0, 0], [1 / 9, 1 / 9, 1 / 9], [0, 0, 0], [0, 0, 0]])
    adv = t([[0.5, 0.5, 0], [0.2, 0, 0], [-1, -1, -1], [0, 0, 0], [0, 0, 0]])
    assert torch.equal(row_signs(adv, mask), signs)
    with pytest.raises(ConfigError, match="needs group_ids and signs"):
        aggregate_loss(values, mask, "balanced-mean", group_ids=torch.tensor([0, 0, 0, 0, 1]))

import math

import pytest
import torch
from tolerance import EXACT, OPS, assert_close, is_close

from ablate.errors import ConfigError, UnknownNameError
from ablate.registry import ALL_REGISTRIES
from ablate.rl import ADVANTAGE_ESTIMATORS, compute_advantages

F64 = torch.float64
EPS = 1e-6


def t(x) -> torch.Tensor:
    return torch.tensor(x, dtype=F64)


def close(actual, expected, atol=0.0):
    """float64 against a hand-computed value (``atol``: the digits a published value was printed with)."""
    assert_close(actual, t(expected), EXACT, atol=atol)


def test_registry_kind_and_names():
    assert ALL_REGISTRIES["advantage estimator"] is ADVANTAGE_ESTIMATORS
    assert ADVANTAGE_ESTIMATORS.names() == ["grpo", "dr_grpo", "rloo", "grpo_process", "gae"]


# --------------------------------------------------------------------------------------------------
# outcome estimators, hand-computed

# group 7: rows 0, 1, 2 (scores 1, 0, 0) and row 4 (no active token: not a member);
# group 3: row 3 alone (score 2)
OUT_MASK = [[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 0], [0, 0, 0]]
OUT_REWARDS = [[0.0, 0.0, 1.0], [0.5, -0.5, 9.0], [0.0, 5.0, 5.0], [0.0, 2.0, 0.0], [3.0, 3.0, 3.0]]
OUT_GROUPS = [7, 7, 7, 3, 7]


def outcome(estimator):
    mask = t(OUT_MASK)
    return compute_advantages(t(OUT_REWARDS), mask, torch.tensor(OUT_GROUPS), estimator=estimator)


def per_row(values):
    """Broadcast one value per row over OUT_MASK."""
    return [[v * m for m in row] for v, row in zip(values, OUT_MASK)]


def test_grpo_hand_computed():
    adv, ret = outcome("grpo")
    std = math.sqrt(((2 / 3) ** 2 + 2 * (1 / 3) ** 2) / 2)  # unbiased: sqrt(1/3)
    close(adv, per_row([(2 / 3) / (std + EPS), (-1 / 3) / (std + EPS), (-1 / 3) / (std + EPS), 0.0, 0.0]))
    close(ret, per_row([1.0, 0.0, 0.0, 2.0, 0.0]))  # the sequence score (padding rewards ignored)


def test_dr_grpo_hand_computed():
    adv, _ = outcome("dr_grpo")
    close(adv, per_row([2 / 3, -1 / 3, -1 / 3, 0.0, 0.0]))


def test_rloo_hand_computed():
    adv, _ = outcome("rloo")
    # r_i - mean of the two others: 1 - 0, 0 - 0.5, 0 - 0.5; = 3/2 * dr_grpo's
    close(adv, per_row([1.0, -0.5, -0.5, 0.0, 0.0]))


@pytest.mark.parametrize("estimator", ["grpo", "dr_grpo", "rloo"])
def test_equal_scores_and_singletons_give_zero_not_nan(estimator):
    mask = t([[1, 1], [1, 0], [1, 1]])
    rewards = t([[0.0, 1.0], [1.0, 0.0], [0.0, 4.0]])
    adv, _ = compute_advantages(rewards, mask, torch.tensor([0, 0, 1]), estimator=estimator)
    assert torch.count_nonzero(adv) == 0 and torch.isfinite(adv).all()


# --------------------------------------------------------------------------------------------------
# grpo_process, hand-computed


def test_grpo_process_hand_computed():
    # one group; seq 0 has steps ending at t=1 (reward 1) and t=3 (reward 0); seq 1 one step ending
    # at t=2 (reward 0.8) and an active token after it. Step rewards {1, 0, 0.8}: mean 0.6,
    # unbiased std sqrt(0.28)
    mask = t([[1, 1, 1, 1, 0], [1, 1, 1, 1, 0]])
    steps = t([[0, 1, 0, 1, 0], [0, 0, 1, 0, 0]])
    rewards = t([[0, 1.0, 0, 0, 0], [0, 0, 0.8, 0, 0]])
    adv, ret = compute_advantages(
        rewards, mask, torch.tensor([0, 0]), estimator="grpo_process", step_mask=steps
    )
    sd = math.sqrt(0.28) + EPS
    n1, n2, n3 = 0.4 / sd, -0.6 / sd, 0.2 / sd
    close(adv, [[n1 + n2, n1 + n2, n2, n2, 0], [n3, n3, n3, 0, 0]])
    close(ret, [[1, 1, 0, 0, 0], [0.8, 0.8, 0.8, 0, 0]])


def test_grpo_process_with_one_final_step_is_grpo():
    # DeepSeekMath: outcome supervision is process supervision with one step at the end
    g = torch.Generator().manual_seed(2)
    lengths = torch.randint(1, 8, (12,), generator=g)
    mask = torch.arange(8).unsqueeze(0) < lengths.unsqueeze(1)
    last = torch.zeros(12, 8, dtype=torch.bool)
    last[torch.arange(12), lengths - 1] = True
    rewards = torch.where(last, torch.randn(12, 8, generator=g, dtype=F64), t(0.0))
    groups = torch.arange(12) // 4
    process, _ = compute_advantages(rewards, mask, groups, estimator="grpo_process", step_mask=last)
    outcome_adv, _ = compute_advantages(rewards, mask, groups, estimator="grpo")
    assert_close(process, outcome_adv, EXACT)


def test_grpo_process_errors():
    mask = t([[1, 1, 1]])
    with pytest.raises(ConfigError, match="needs step_mask"):
        compute_advantages(t([[0, 0, 1.0]]), mask, torch.tensor([0]), estimator="grpo_process")
    with pytest.raises(ConfigError, match="1 active token"):
        compute_advantages(
            t([[0.1, 0, 1.0]]), mask, torch.tensor([0]), estimator="grpo_process", step_mask=t([[0, 0, 1]])
        )


# --------------------------------------------------------------------------------------------------
# gae, hand-computed


def test_gae_hand_computed():
    rewards = t([[0.0, 0.0, 1.0, 0.0]])
    values = t([[0.5, 0.6, 0.7, 123.0]])
    mask = t([[1, 1, 1, 0]])
    adv, ret = compute_advantages(rewards, mask, None, estimator="gae", values=values, gamma=0.9, lam=0.8)
    # t=2: delta = 1 - 0.7 = 0.3; t=1: delta = 0.9*0.7 - 0.6 = 0.03, A = 0.03 + 0.72*0.3 = 0.246
    # t=0: delta = 0.9*0.6 - 0.5 = 0.04, A = 0.04 + 0.72*0.246 = 0.21712
    close(adv, [[0.21712, 0.246, 0.3, 0.0]])
    close(ret, [[0.71712, 0.846, 1.0, 0.0]])


def test_gae_with_gamma_lam_one_and_zero_values_is_reward_to_go():
    rewards = t([[0.1, -0.2, 0.0, 1.0], [0.5, 0.5, 0.0, 0.0]])
    mask = t([[1, 1, 1, 1], [1, 1, 0, 0]])
    adv, ret = compute_advantages(rewards, mask, None, estimator="gae", values=torch.zeros(2, 4, dtype=F64))
    close(adv, [[0.9, 0.8, 1.0, 1.0], [1.0, 0.5, 0.0, 0.0]])
    close(ret, [[0.9, 0.8, 1.0, 1.0], [1.0, 0.5, 0.0, 0.0]])


def test_gae_errors():
    x = t([[0.0, 1.0]])
    with pytest.raises(ConfigError, match="'gae' needs values"):
        compute_advantages(x, x + 1, None, estimator="gae")
    with pytest.raises(ConfigError, match="gamma=1.5"):
        compute_advantages(x, x + 1, None, estimator="gae", values=x, gamma=1.5)
    with pytest.raises(ConfigError, match="lam=-0.1"):
        compute_advantages(x, x + 1, None, estimator="gae", values=x, lam=-0.1)


# --------------------------------------------------------------------------------------------------
# loop references on seeded random masks (with holes)


def random_rollout(seed: int, batch: int = 12, width: int = 10):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(batch, width, generator=g) < 0.75  # random holes, not only right padding
    mask[0] = False  # an empty row
    steps = (torch.rand(batch, width, generator=g) < 0.3) & mask
    rewards = torch.randn(batch, width, generator=g, dtype=F64)
    values = torch.randn(batch, width, generator=g, dtype=F64)
    groups = torch.randint(0, 4, (batch,), generator=g) * 10
    return rewards, values, mask, steps, groups


def gae_loop(rewards, values, mask, gamma, lam):
    out = [[0.0] * len(row) for row in rewards]
    for i in range(len(rewards)):
        active = [t for t in range(len(rewards[i])) if mask[i][t]]
        next_value = next_adv = 0.0
        for t in reversed(active):
            delta = rewards[i][t] + gamma * next_value - values[i][t]
            next_adv = delta + gamma * lam * next_adv
            next_value = values[i][t]
            out[i][t] = next_adv
    return out


def grpo_process_loop(rewards, mask, steps, groups):
    batch, width = len(rewards), len(rewards[0])
    out = [[0.0] * width for _ in range(batch)]
    for g in set(groups):
        members = [i for i in range(batch) if groups[i] == g]
        rs = [rewards[i][t] for i in members for t in range(width) if steps[i][t] and mask[i][t]]
        if len(rs) < 2:
            continue
        mean = sum(rs) / len(rs)
        std = math.sqrt(sum((r - mean) ** 2 for r in rs) / (len(rs) - 1))
        for i in members:
            for t in range(width):
                if mask[i][t]:
                    out[i][t] = sum(
                        (rewards[i][s] - mean) / (std + EPS)
                        for s in range(t, width)
                        if steps[i][s] and mask[i][s]
                    )
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gae_matches_loop_reference(seed):
    rewards, values, mask, _, _ = random_rollout(seed)
    gamma, lam = 0.97, 0.9
    adv, ret = compute_advantages(rewards, mask, None, estimator="gae", values=values, gamma=gamma, lam=lam)
    expected = t(gae_loop(rewards.tolist(), values.tolist(), mask.tolist(), gamma, lam))
    assert_close(adv, expected, EXACT)
    assert_close(ret, torch.where(mask, expected + values, t(0.0)), EXACT)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_grpo_process_matches_loop_reference(seed):
    rewards, _, mask, steps, groups = random_rollout(seed)
    rewards = torch.where(steps, rewards, t(0.0))
    adv, _ = compute_advantages(rewards, mask, groups, estimator="grpo_process", step_mask=steps)
    expected = grpo_process_loop(rewards.tolist(), mask.tolist(), steps.tolist(), groups.tolist())
    assert_close(adv, t(expected), EXACT)
    assert adv.abs().sum() > 1.0


# --------------------------------------------------------------------------------------------------
# every estimator


@pytest.mark.parametrize("estimator", ADVANTAGE_ESTIMATORS.names())
def test_every_estimator_padding_invariant_finite_and_without_gradient(estimator):
    rewards, values, mask, steps, groups = random_rollout(4)
    rewards = torch.where(steps, rewards, t(0.0))  # on step ends, so that grpo_process accepts them
    kwargs = {"estimator": estimator, "values": values, "step_mask": steps, "gamma": 0.9, "lam": 0.95}
    adv, ret = compute_advantages(rewards, mask, groups, **kwargs)
    assert torch.isfinite(adv).all() and torch.isfinite(ret).all()
    assert torch.count_nonzero(adv[~mask]) == 0 and torch.count_nonzero(ret[~mask]) == 0
    assert adv.abs().sum() > 0.1

    pad = ~mask
    bad_rewards = torch.where(pad, t(1e4), rewards).requires_grad_(True)
    bad_values = torch.where(pad, t(-1e4), values).requires_grad_(True)
    kwargs.update(values=bad_values, step_mask=steps | pad)
    adv2, ret2 = compute_advantages(bad_rewards, mask, groups, **kwargs)
    assert_close(adv2, adv, EXACT)
    assert_close(ret2, ret, EXACT)
    assert not adv2.requires_grad and not ret2.requires_grad

    # whitening: mean 0 and unbiased std 1 over the active tokens, padding 0, returns unchanged
    white, ret3 = compute_advantages(rewards, mask, groups, whiten=True, **kwargs)
    assert white[mask].mean().item() == pytest.approx(0.0, abs=1e-12)
    assert white[mask].std().item() == pytest.approx(1.0, abs=1e-6)
    assert torch.count_nonzero(white[~mask]) == 0
    assert_close(ret3, ret, EXACT)


def test_group_estimators_need_group_ids():
    x = t([[1.0]])
    with pytest.raises(ConfigError, match="needs group_ids"):
        compute_advantages(x, x, None, estimator="rloo")


def test_unknown_estimator():
    x = t([[1.0]])
    with pytest.raises(UnknownNameError, match="did you mean 'grpo'"):
        compute_advantages(x, x, torch.tensor([0]), estimator="grpoo")


# --------------------------------------------------------------------------------------------------
# grpo's normalization scopes (algo.adv_mean x algo.adv_std), hand-computed

# group 7: rows 0, 1, 2 (scores 1, 0, 0) and row 4 (no active token: a padding row, not a member);
# group 3: row 3 alone (score 2); group 5: rows 5, 6 (scores 1, 1: zero variance).
# Batch members: rows 0, 1, 2, 3, 5, 6, scores [1, 0, 0, 2, 1, 1]: mean 5/6, unbiased std sqrt(17/30).
SCOPE_MASK = [[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 0], [0, 0, 0], [1, 0, 0], [1, 1, 1]]
SCOPE_REWARDS = [[0.0, 0.0, 1.0], [0.5, -0.5, 9.0], [0.0, 5.0, 5.0], [0.0, 2.0, 0.0], [3.0, 3.0, 3.0],
                 [1.0, 7.0, 7.0], [0.5, 0.0, 0.5]]
SCOPE_GROUPS = [7, 7, 7, 3, 7, 5, 5]
GROUP_STD = math.sqrt(1 / 3)  # group 7: scores 1, 0, 0
BATCH_MEAN, BATCH_STD = 5 / 6, math.sqrt(17 / 30)
SCOPE_EXPECTED = {
    ("group", "group"): [(2 / 3) / (GROUP_STD + EPS), (-1 / 3) / (GROUP_STD + EPS), (-1 / 3) / (GROUP_STD + EPS),
                         0.0, 0.0, 0.0, 0.0],
    ("group", "none"): [2 / 3, -1 / 3, -1 / 3, 0.0, 0.0, 0.0, 0.0],
    # Lite PPO: group mean, batch std; a singleton and a zero-variance group are still 0 (r - group mean = 0)
    ("group", "batch"): [(2 / 3) / (BATCH_STD + EPS), (-1 / 3) / (BATCH_STD + EPS),
                         (-1 / 3) / (BATCH_STD + EPS), 0.0, 0.0, 0.0, 0.0],
    # batch mean: the singleton and the zero-variance group get the batch baseline
    ("batch", "none"): [1 / 6, -5 / 6, -5 / 6, 7 / 6, 0.0, 1 / 6, 1 / 6],
    ("batch", "batch"): [v / (BATCH_STD + EPS) for v in (1 / 6, -5 / 6, -5 / 6, 7 / 6)]
    + [0.0] + [(1 / 6) / (BATCH_STD + EPS)] * 2,
}


def scoped(mean_scope, std_scope, rewards=SCOPE_REWARDS, mask=SCOPE_MASK, groups=SCOPE_GROUPS,
           estimator="grpo"):
    m = t(mask)
    return compute_advantages(t(rewards), m, torch.tensor(groups), estimator=estimator,
                              mean_scope=mean_scope, std_scope=std_scope)


@pytest.mark.parametrize("scopes", list(SCOPE_EXPECTED), ids="/".join)
def test_grpo_scopes_hand_computed(scopes):
    adv, ret = scoped(*scopes)
    close(adv, [[v * m for m in row] for v, row in zip(SCOPE_EXPECTED[scopes], SCOPE_MASK)])
    close(ret, [[v * m for m in row] for v, row in zip([1.0, 0.0, 0.0, 2.0, 0.0, 1.0, 1.0], SCOPE_MASK)])


def test_grpo_default_scopes_are_group_group_and_dr_grpo_is_std_none():
    default, _ = compute_advantages(t(SCOPE_REWARDS), t(SCOPE_MASK), torch.tensor(SCOPE_GROUPS), estimator="grpo")
    assert torch.equal(default, scoped("group", "group")[0])
    for seed in range(3):  # exactly equal, on random rollouts with holes and empty rows
        rewards, _, mask, _, groups = random_rollout(seed)
        dr, _ = compute_advantages(rewards, mask, groups, estimator="dr_grpo")
        grpo_none, _ = compute_advantages(rewards, mask, groups, estimator="grpo", std_scope="none")
        assert torch.equal(dr, grpo_none)


@pytest.mark.parametrize("scopes", list(SCOPE_EXPECTED), ids="/".join)
def test_grpo_scopes_zero_variance_batch_and_single_row_give_zero_not_nan(scopes):
    # every member scored 0.1 (not exact in binary: the computed std is a rounding error above 0)
    adv, _ = scoped(*scopes, rewards=[[0.0, 0.1], [0.1, 0.0], [0.05, 0.05], [0.1, 0.0]],
                    mask=[[1, 1], [1, 1], [1, 1], [1, 0]], groups=[0, 0, 1, 1])
    if scopes != ("group", "group"):  # group/group keeps GRPO's arithmetic (see the report of issue 13)
        assert torch.count_nonzero(adv) == 0
    assert torch.isfinite(adv).all()
    # a batch of one member: no baseline in any scope
    adv, _ = scoped(*scopes, rewards=[[1.0, 2.0], [5.0, 5.0]], mask=[[1, 1], [0, 0]], groups=[0, 1])
    assert torch.count_nonzero(adv) == 0


def test_grpo_scopes_are_over_the_batch_given():
    """'batch' is the rows passed in: the step's rollout batch, not a slice of it."""
    whole, _ = scoped("group", "batch")
    part, _ = scoped("group", "batch", rewards=SCOPE_REWARDS[:3], mask=SCOPE_MASK[:3], groups=SCOPE_GROUPS[:3])
    assert not is_close(whole[:3], part, EXACT)


def test_scope_errors():
    with pytest.raises(ConfigError, match="std_scope='group' are refused"):
        scoped("batch", "group")
    with pytest.raises(ConfigError, match="must be mean_scope in"):
        scoped("prompt", "group")
    for estimator in ("dr_grpo", "rloo", "grpo_process", "gae"):
        with pytest.raises(ConfigError, match=f"{estimator!r} ignores mean_scope / std_scope"):
            scoped("group", "batch", estimator=estimator)


# TRL's GRPOTrainer advantages (huggingface/trl f2cd5771, trl/trainer/grpo_trainer.py
# `_generate_and_score_completions`, multi_objective_aggregation="sum_then_normalize", and
# trl/trainer/utils.py `nanstd`), transcribed line for line; TRL's own nanstd is used when TRL is
# installed. TRL adds 1e-4 to the std; ablate 1e-6 (GROUP_STD_EPS).
def _trl_nanstd(tensor, dim=None):
    mean = torch.nanmean(tensor, dim=dim, keepdim=True)
    variance = torch.nanmean((tensor - mean) ** 2, dim=dim, keepdim=True)
    count = torch.sum(~torch.isnan(tensor), dim=dim, keepdim=True)
    correction = count / (count - 1)
    correction = torch.where(count > 1, correction, torch.full_like(correction, float("nan")))
    std = torch.sqrt(variance * correction)
    return std.squeeze() if dim is None else std.squeeze(dim)


def trl_advantages(rewards, num_generations, scale_rewards, eps=1e-4):
    try:
        from trl.trainer.utils import nanstd
    except ImportError:
        nanstd = _trl_nanstd
    mean_grouped_rewards = torch.nanmean(rewards.view(-1, num_generations), dim=1)
    mean_grouped_rewards = mean_grouped_rewards.repeat_interleave(num_generations, dim=0)
    if scale_rewards in ["group", "none"]:
        std_rewards = nanstd(rewards.view(-1, num_generations), dim=1)
        std_rewards = std_rewards.repeat_interleave(num_generations, dim=0)
    else:  # "batch"
        std_rewards = nanstd(rewards).expand_as(rewards)
    advantages = rewards - mean_grouped_rewards
    if scale_rewards != "none":
        advantages = advantages / (std_rewards + eps)
    return advantages


def test_trl_transcription_gives_the_hand_values_of_the_notes():
    rewards = t([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0])  # G=4; issue13-spec.md §1a
    close(trl_advantages(rewards, 4, "group"), [1.4997, -0.4999, -0.4999, -0.4999, 0.8659, 0.8659, -0.8659, -0.8659],
          atol=0.5e-4)  # the notes print 4 decimals
    close(trl_advantages(rewards, 4, "batch"), [1.4489, -0.4830, -0.4830, -0.4830, 0.9659, 0.9659, -0.9659, -0.9659],
          atol=0.5e-4)
    close(trl_advantages(rewards, 4, "none"), [0.75, -0.25, -0.25, -0.25, 0.5, 0.5, -0.5, -0.5])


@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_grpo_scopes_match_trl_scale_rewards(scale_rewards, seed):
    """adv_mean=group with adv_std=<TRL's scale_rewards> is TRL's advantage on identical rewards."""
    g = torch.Generator().manual_seed(seed)
    num_prompts, group = 6, 4
    rewards = torch.randint(0, 3, (num_prompts * group,), generator=g).to(F64) / 2  # ties and constant groups
    rewards[:group] = 0.5  # one zero-variance group
    lengths = torch.randint(1, 6, (num_prompts * group,), generator=g)
    mask = torch.arange(6).unsqueeze(0) < lengths.unsqueeze(1)  # (B, 6), right padding
    token_rewards = torch.zeros(mask.shape, dtype=F64)
    token_rewards[torch.arange(len(rewards)), lengths - 1] = rewards  # on the last active token
    groups = torch.arange(num_prompts).repeat_interleave(group)
    adv, _ = compute_advantages(token_rewards, mask, groups, estimator="grpo", std_scope=scale_rewards)
    ours = adv[:, 0]  # every active token carries the sequence's advantage
    # float32's rounding: TRL's Bessel factor count / (count - 1) divides integer counts, which gives float32
    assert_close(ours.float(), trl_advantages(rewards, group, scale_rewards, eps=EPS).float(), OPS)
    # with TRL's own epsilon (1e-4) the two differ by the epsilon alone: |adv| * 1e-4 / std <= 3 * 4e-4 for these
    # advantages (|adv| <= 3) and stds (>= 0.25)
    assert_close(ours, trl_advantages(rewards, group, scale_rewards), EXACT, atol=1.2e-3)


def test_the_config_knows_which_estimators_read_the_scopes():
    from ablate.config.rules import SCOPED_ESTIMATORS as CONFIG_SCOPED
    from ablate.rl.advantages import SCOPED_ESTIMATORS

    assert CONFIG_SCOPED == SCOPED_ESTIMATORS


def test_a_group_of_equal_non_binary_scores_gets_exactly_zero_under_grpo():
    """Eight completions that all scored 0.1 (float32): the group mean 0.8 / 8 rounds away from 0.1, and
    the original arithmetic divides that rounding by an std of the same size plus 1e-6, giving each a
    non-zero advantage (0.0074, the value issue 30 reports); exact_constant (algo.constant_groups: zero,
    the default) gives exactly 0. A group with variance is the same either way."""
    rewards = torch.zeros(11, 2)
    rewards[:, -1] = torch.tensor([0.1] * 8 + [1.0, 0.0, 0.5])
    mask = torch.ones(11, 2)
    groups = torch.tensor([0] * 8 + [1, 1, 1])
    old, _ = compute_advantages(rewards, mask, groups, estimator="grpo", exact_constant=False)
    new, _ = compute_advantages(rewards, mask, groups, estimator="grpo")
    assert float(old[:8].abs().max()) == pytest.approx(0.0074, abs=1e-4)  # the rounding, amplified
    assert bool((new[:8] == 0).all())
    assert torch.equal(new[8:], old[8:])


def test_constant_groups_is_in_the_key_only_where_it_can_matter():
    from ablate.config import TrialConfig

    base = TrialConfig()  # grpo, final answer alone with weight 1: integer scores, exact means
    assert base.with_overrides(["algo.constant_groups=rounding"]).trial_key() == base.trial_key()
    fmt = TrialConfig.from_overrides(["reward.components=[final_answer, format]"])
    assert fmt.with_overrides(["algo.constant_groups=rounding"]).trial_key() != fmt.trial_key()
    rloo = fmt.with_overrides(["algo.advantage=rloo"])
    assert rloo.with_overrides(["algo.constant_groups=rounding"]).trial_key() == rloo.trial_key()

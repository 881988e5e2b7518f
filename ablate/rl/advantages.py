"""Advantage estimators: per-token advantages and returns from per-token rewards.

Every estimator takes ``token_rewards`` [B, T], every reward component already placed at the token
it credits (a final-answer reward on the last active token, a step reward on the last token of its
step, a KL penalty on every token), and returns ``(advantages, returns)``, both [B, T] and exactly 0
on padding. *Outcome-style* estimators (``grpo``, ``dr_grpo``, ``rloo``) first sum each sequence's
rewards into one score and give every active token of the sequence the same advantage;
*process-style* ones (``grpo_process``, ``gae``) use rewards-to-go, so a token is credited only with
rewards at or after it.

Normalizer scopes (where the big libraries have had their bugs): the group statistics of the
outcome estimators and of ``grpo_process`` are over the members of one prompt's group in the batch
given (call :func:`compute_advantages` on the whole rollout batch, never on a micro-batch);
whitening (``whiten=True``) is over all active tokens of the batch given. ``grpo`` alone also takes
the scope of its mean (:data:`MEAN_SCOPES`: ``group`` or ``batch``) and of its std
(:data:`STD_SCOPES`: ``group``, ``batch`` or ``none``); a "batch" statistic is over every group
member of the batch given, i.e. the step's whole rollout batch.

Advantages carry no gradient: everything here runs under ``torch.no_grad()``.
"""

from __future__ import annotations

from typing import Protocol

import torch

from ablate.errors import ConfigError
from ablate.registry import Registry
from ablate.rl.masking import as_bool_mask, check_same_shape, masked_whiten, zero_padding

__all__ = [
    "ADVANTAGE_ESTIMATORS", "GROUP_BASELINE_ESTIMATORS", "GROUP_STD_EPS", "MEAN_SCOPES", "SCOPED_ESTIMATORS",
    "STD_SCOPES", "AdvantageFn", "compute_advantages", "constant_group_rows", "constant_groups_have_zero_advantage",
]

#: Added to the standard deviation (a group's or the batch's) by ``grpo`` and ``grpo_process``, as in
#: GRPO and ROLL; TRL's ``GRPOTrainer`` adds 1e-4 instead, which shrinks advantages of groups with a
#: std near 1e-4 (with 0/1 rewards and G <= 64 every non-constant group has std >= 0.12, so the
#: two agree to within 1e-3 relative there).
GROUP_STD_EPS = 1e-6
#: Where ``grpo`` takes the mean it subtracts: the row's group, or every group member of the batch.
MEAN_SCOPES: tuple[str, ...] = ("group", "batch")
#: What ``grpo`` divides by: the std of the row's group, of every member of the batch, or nothing.
STD_SCOPES: tuple[str, ...] = ("group", "batch", "none")
#: Estimators that take ``mean_scope`` / ``std_scope``; the others refuse scopes other than group/group.
SCOPED_ESTIMATORS: frozenset[str] = frozenset({"grpo"})


class AdvantageFn(Protocol):
    """The one signature of every advantage estimator.

    Inputs are already padding-safe: ``token_rewards`` and ``values`` are 0 on padding, ``mask`` is
    bool [B, T], ``step_mask`` is bool [B, T] (and within ``mask``) or None. It runs under no_grad
    and returns ``(advantages, returns)``, both [B, T]; the caller zeroes padding again.
    """

    def __call__(
        self,
        token_rewards: torch.Tensor,
        mask: torch.Tensor,
        group_ids: torch.Tensor | None,
        *,
        values: torch.Tensor | None,
        gamma: float,
        lam: float,
        step_mask: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]: ...


#: ``name -> AdvantageFn``.
ADVANTAGE_ESTIMATORS: Registry[AdvantageFn] = Registry("advantage estimator")


# --------------------------------------------------------------------------------------------------
# group statistics


def _group_index(
    group_ids: torch.Tensor | None, estimator: str, batch: int, device: torch.device
) -> tuple[torch.Tensor, int]:
    """(inverse [B] in 0..G-1, G) for ``group_ids`` [B]."""
    if group_ids is None:
        raise ConfigError(
            f"advantage estimator {estimator!r} normalizes within each prompt's group and needs group_ids "
            "(the [B] prompt id of each completion)"
        )
    if tuple(group_ids.shape) != (batch,):
        raise ValueError(f"group_ids must be [B] = [{batch}], got {list(group_ids.shape)}")
    _, inverse = torch.unique(group_ids.to(device), return_inverse=True)
    return inverse, (int(inverse.max()) + 1 if batch else 0)


def _group_sum(x: torch.Tensor, inverse: torch.Tensor, num_groups: int) -> torch.Tensor:
    """[G] sums of the rows ``x`` [B] per group."""
    return torch.zeros(num_groups, dtype=x.dtype, device=x.device).index_add_(0, inverse, x)


def _sequence_scores(
    token_rewards: torch.Tensor, mask: torch.Tensor, group_ids: torch.Tensor | None, estimator: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row score (sum of its rewards), validity, and its group's member count and mean.

    Rows with no active token are not group members (they get advantage 0).
    """
    score = token_rewards.sum(dim=-1)  # (B,), padding already 0
    valid = mask.any(dim=-1)  # (B,)
    inverse, g = _group_index(group_ids, estimator, score.shape[0], score.device)
    w = valid.to(score.dtype)
    count = _group_sum(w, inverse, g)[inverse]  # (B,) members of the row's group
    total = _group_sum(score * w, inverse, g)[inverse]  # (B,)
    mean = total / count.clamp(min=1)
    return score, valid, inverse, g, count, total, mean


def _all_equal(score: torch.Tensor, valid: torch.Tensor, inverse: torch.Tensor, g: int) -> torch.Tensor:
    """[G] whether the valid members of each group all have the same ``score`` [B], exactly (the largest
    and the smallest agree; a group without a valid member counts as all-equal)."""
    big = torch.finfo(score.dtype).max
    hi = torch.full((g,), -big, dtype=score.dtype, device=score.device).scatter_reduce(
        0, inverse, torch.where(valid, score, torch.full_like(score, -big)), reduce="amax")
    lo = torch.full((g,), big, dtype=score.dtype, device=score.device).scatter_reduce(
        0, inverse, torch.where(valid, score, torch.full_like(score, big)), reduce="amin")
    return hi <= lo


def _broadcast(per_seq: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return zero_padding(per_seq.unsqueeze(-1).expand(mask.shape), mask)  # (B, T)


# --------------------------------------------------------------------------------------------------
# outcome-style


def _batch_stats(
    score: torch.Tensor, valid: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(mean, unbiased std, member count, all-equal) of the valid rows of ``score`` [B]; 0-dim tensors.

    All-equal is exact (the largest and the smallest member agree), so a constant batch is recognised
    even where its computed std is a rounding error above 0.
    """
    w = valid.to(score.dtype)
    n = w.sum()
    mean = (score * w).sum() / n.clamp(min=1)
    std = torch.sqrt((((score - mean) ** 2) * w).sum() / (n - 1).clamp(min=1))
    if not bool(valid.any()):
        return mean, std, n, torch.tensor(True, device=score.device)
    members = score[valid]
    return mean, std, n, members.max() == members.min()


def _scoped_normalization(
    token_rewards: torch.Tensor,
    mask: torch.Tensor,
    group_ids: torch.Tensor | None,
    estimator: str,
    mean_scope: str,
    std_scope: str,
    exact_constant: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(A [B], r [B])``: ``A_i = (r_i - mean) / (std + 1e-6)`` with each statistic over its scope.

    Scopes (``MEAN_SCOPES`` x ``STD_SCOPES``, mean batch with std group excepted): ``group`` = the
    valid members of row i's group, ``batch`` = every valid row of the batch given, std ``none`` = no
    division. ``A_i = 0`` where the mean's scope has fewer than 2 members, where the std's scope has
    fewer than 2 members, and where the scope scored the same (exactly: the largest and the smallest
    member agree; for a ``group`` std only with ``exact_constant``); never NaN. Without
    ``exact_constant`` the group/group arithmetic is the original GRPO code: a group whose members all
    scored e.g. 0.1 then gets a small non-zero advantage, its mean's rounding (~1e-17 in float64, ~1e-8
    in float32) divided by an std of the same size plus 1e-6 (-0.0074 was observed).
    """
    if mean_scope not in MEAN_SCOPES or std_scope not in STD_SCOPES:
        raise ConfigError(
            f"advantage scopes must be mean_scope in {list(MEAN_SCOPES)} and std_scope in {list(STD_SCOPES)}, "
            f"got mean_scope={mean_scope!r}, std_scope={std_scope!r}"
        )
    if (mean_scope, std_scope) == ("batch", "group"):
        raise ConfigError(
            "advantage scopes mean_scope='batch' with std_scope='group' are refused: a batch-centred reward "
            "divided by a group's std is undefined for every group whose members agree (std 0); use "
            "std_scope='batch' or 'none'"
        )
    score, valid, inverse, g, count, _, mean = _sequence_scores(token_rewards, mask, group_ids, estimator)
    zero = torch.zeros_like(score)
    if mean_scope == "group":
        centred, ok = score - mean, valid & (count > 1)  # (B,), (B,)
    else:
        b_mean, _, n, constant = _batch_stats(score, valid)
        centred, ok = score - b_mean, valid & (n > 1) & ~constant
    if std_scope == "none":
        return torch.where(ok, centred, zero), score
    if std_scope == "group":  # mean_scope is group here
        sq = _group_sum(((score - mean) ** 2) * valid.to(score.dtype), inverse, g)[inverse]
        std = torch.sqrt(sq / (count - 1).clamp(min=1))
        if exact_constant:  # a group whose valid members all scored the same gets exactly 0
            ok = ok & ~_all_equal(score, valid, inverse, g)[inverse]
        return torch.where(ok, centred / (std + GROUP_STD_EPS), zero), score
    _, b_std, n, constant = _batch_stats(score, valid)
    ok = ok & (n > 1) & ~constant
    return torch.where(ok, centred / (b_std + GROUP_STD_EPS), zero), score


@ADVANTAGE_ESTIMATORS.register("grpo")
def grpo_advantages(
    token_rewards: torch.Tensor,
    mask: torch.Tensor,
    group_ids: torch.Tensor | None,
    *,
    values: torch.Tensor | None,
    gamma: float,
    lam: float,
    step_mask: torch.Tensor | None,
    mean_scope: str = "group",
    std_scope: str = "group",
    exact_constant: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO outcome supervision (Shao et al. 2024, DeepSeekMath §4.1.2), [B, T].

    ``r_i`` = sum of sequence i's token rewards; ``A_i = (r_i - mean) / (std + 1e-6)``, broadcast over
    i's active tokens, with (defaults) the mean and the *unbiased* std (torch's default) over the
    members of i's group. A group of one member (std undefined) gives advantage 0; a group whose
    members all scored the same gives 0. Returns: ``r_i`` broadcast over the active tokens.

    Scopes (as TRL's ``scale_rewards`` where TRL has them: its mean is always the group's):

    * ``std_scope="group"``: the std of i's group (GRPO; TRL ``"group"``);
    * ``std_scope="batch"``: the unbiased std of the raw scores ``r_j`` of every valid row of the
      batch (Lite PPO, Liu et al. 2025 "Tricks or Traps?", with ``mean_scope="group"``; TRL
      ``"batch"``; ScaleRL's batch-level normalization as TRL reads it); 0 when the whole batch scored
      the same;
    * ``std_scope="none"``: no division (Dr. GRPO, Liu et al. 2025; TRL ``"none"``), equal to ``dr_grpo``;
    * ``mean_scope="batch"``: the mean of every valid row of the batch (with std ``batch``: the
      batch z-score; with ``none``: REINFORCE with a batch-mean baseline); a group of one member then
      gets a non-zero advantage. ``mean_scope="batch"`` with ``std_scope="group"`` raises.

    ``exact_constant`` (default): a group whose members all scored the same gets advantage exactly 0;
    False keeps the original arithmetic, where rounding in the group mean gives such a group a small
    non-zero advantage when its score is not exact in binary (``algo.constant_groups: rounding``).

    The batch is the ``[B]`` rows given: call it on the step's whole rollout batch, never a micro-batch.
    """
    adv, score = _scoped_normalization(token_rewards, mask, group_ids, "grpo", mean_scope, std_scope,
                                       exact_constant)
    return _broadcast(adv, mask), _broadcast(score, mask)


@ADVANTAGE_ESTIMATORS.register("dr_grpo")
def dr_grpo_advantages(
    token_rewards: torch.Tensor,
    mask: torch.Tensor,
    group_ids: torch.Tensor | None,
    *,
    values: torch.Tensor | None,
    gamma: float,
    lam: float,
    step_mask: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training"), [B, T].

    ``A_i = r_i - mean_g``: GRPO without the division by the group std (which over-weights
    prompts that are nearly always solved or failed); exactly ``grpo`` with ``std_scope="none"``.
    ``r_i`` = sum of the sequence's token rewards, mean over the members of its group; 0 for a
    group of one. Broadcast over active tokens. Returns: ``r_i`` broadcast.
    """
    adv, score = _scoped_normalization(token_rewards, mask, group_ids, "dr_grpo", "group", "none")
    return _broadcast(adv, mask), _broadcast(score, mask)


@ADVANTAGE_ESTIMATORS.register("rloo")
def rloo_advantages(
    token_rewards: torch.Tensor,
    mask: torch.Tensor,
    group_ids: torch.Tensor | None,
    *,
    values: torch.Tensor | None,
    gamma: float,
    lam: float,
    step_mask: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE leave-one-out (Kool et al. 2019; Ahmadian et al. 2024), [B, T].

    ``A_i = r_i - (sum_{j in g, j != i} r_j) / (n_g - 1)``: the baseline is the mean of the *other*
    members, so it is independent of the sample it scores (unbiased); equal to
    ``n_g / (n_g - 1) * (r_i - mean_g)``. 0 for a group of one. Broadcast over active tokens.
    Returns: ``r_i`` broadcast.
    """
    score, valid, _, _, count, total, _ = _sequence_scores(token_rewards, mask, group_ids, "rloo")
    others = (total - score) / (count - 1).clamp(min=1)
    adv = torch.where(valid & (count > 1), score - others, torch.zeros_like(score))
    return _broadcast(adv, mask), _broadcast(score, mask)


# --------------------------------------------------------------------------------------------------
# process-style


def _reverse_cumsum(x: torch.Tensor) -> torch.Tensor:
    """``y_t = sum_{s >= t} x_s`` along the last dimension."""
    return x.flip(-1).cumsum(-1).flip(-1)


@ADVANTAGE_ESTIMATORS.register("grpo_process")
def grpo_process_advantages(
    token_rewards: torch.Tensor,
    mask: torch.Tensor,
    group_ids: torch.Tensor | None,
    *,
    values: torch.Tensor | None,
    gamma: float,
    lam: float,
    step_mask: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO process supervision (Shao et al. 2024, DeepSeekMath §4.1.3), [B, T].

    Step j of output i ends at token ``index(j)`` (``step_mask`` 1 there) and carries reward
    ``r_i^index(j)``. Each step reward is normalized with the mean and the unbiased std of *all*
    step rewards of the group (every step of every member):
    ``r~ = (r - mean_g) / (std_g + 1e-6)`` (0 when the group has a single step). The advantage of
    token t is the sum of the normalized rewards of the steps that end at or after t:
    ``A_i,t = sum_{index(j) >= t} r~_i^index(j)``; tokens after the last step end get 0.
    Returns: the raw (unnormalized) rewards-to-go ``sum_{index(j) >= t} r_i^index(j)``.

    Every reward must sit on a step end (``step_mask``); a non-zero reward elsewhere raises, since
    this estimator would silently drop it.
    """
    if step_mask is None:
        raise ConfigError(
            "advantage estimator 'grpo_process' needs step_mask ([B, T], 1 on the last token of each "
            "step, where the step rewards sit); use a step-placed reward or another estimator"
        )
    off_step = (token_rewards != 0) & mask & ~step_mask
    if bool(off_step.any()):
        raise ConfigError(
            "advantage estimator 'grpo_process' uses only rewards on step ends (step_mask), but "
            f"{int(off_step.sum())} active token(s) elsewhere carry a non-zero reward; place every reward on "
            "a step end, or use 'gae' (per-token rewards) or an outcome estimator"
        )
    step = step_mask & mask  # (B, T)
    r = zero_padding(token_rewards, step)  # (B, T), rewards on step ends only
    inverse, g = _group_index(group_ids, "grpo_process", r.shape[0], r.device)
    w = step.to(r.dtype)
    count = _group_sum(w.sum(-1), inverse, g)[inverse].unsqueeze(-1)  # (B, 1) steps in the row's group
    mean = (_group_sum(r.sum(-1), inverse, g)[inverse] / count.squeeze(-1).clamp(min=1)).unsqueeze(-1)
    sq = _group_sum((zero_padding(r - mean, step) ** 2).sum(-1), inverse, g)[inverse].unsqueeze(-1)
    std = torch.sqrt(sq / (count - 1).clamp(min=1))  # (B, 1)
    normalized = torch.where(step & (count > 1), (r - mean) / (std + GROUP_STD_EPS), torch.zeros_like(r))
    return zero_padding(_reverse_cumsum(normalized), mask), zero_padding(_reverse_cumsum(r), mask)


@ADVANTAGE_ESTIMATORS.register("gae")
def gae_advantages(
    token_rewards: torch.Tensor,
    mask: torch.Tensor,
    group_ids: torch.Tensor | None,
    *,
    values: torch.Tensor | None,
    gamma: float,
    lam: float,
    step_mask: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation (Schulman et al. 2016), [B, T].

    Over the active tokens of each sequence in order (padding, even in the middle, is skipped):
    ``delta_t = r_t + gamma * V_next - V_t`` and ``A_t = delta_t + gamma * lam * A_next``, where
    ``next`` is the next active token and ``V``/``A`` after the last active token are 0 (the
    episode ends at EOS). Returns: ``A_t + V_t`` (the lambda-return, the critic's target).
    ``group_ids`` is not used. Needs ``values`` (a critic).
    """
    if values is None:
        raise ConfigError(
            "advantage estimator 'gae' needs values ([B, T] critic predictions); enable the critic or "
            "choose grpo, dr_grpo, rloo or grpo_process"
        )
    batch, length = token_rewards.shape
    adv = torch.zeros_like(token_rewards)
    next_value = token_rewards.new_zeros(batch)
    next_adv = token_rewards.new_zeros(batch)
    for t in range(length - 1, -1, -1):
        active = mask[:, t]
        delta = token_rewards[:, t] + gamma * next_value - values[:, t]
        a = delta + gamma * lam * next_adv
        adv[:, t] = torch.where(active, a, torch.zeros_like(a))
        next_value = torch.where(active, values[:, t], next_value)
        next_adv = torch.where(active, a, next_adv)
    return adv, zero_padding(adv + values, mask)


# --------------------------------------------------------------------------------------------------
# groups that scored the same

#: Estimators whose baseline is the row's own group (``grpo`` only with ``mean_scope="group"``): a group
#: whose members all scored the same has advantage 0 by their definition.
GROUP_BASELINE_ESTIMATORS: frozenset[str] = frozenset({"grpo", "dr_grpo", "rloo"})


def constant_groups_have_zero_advantage(estimator: str, *, mean_scope: str = "group", std_scope: str = "group",
                                        exact_constant: bool = True, whiten: bool = False) -> bool:
    """Whether under these settings a group whose members all scored the same has advantage 0 by the
    estimator's definition: its baseline is the group's own mean (:data:`GROUP_BASELINE_ESTIMATORS`,
    ``grpo`` with ``mean_scope="group"``) and no whitening shifts it afterwards; not ``grpo`` with a
    group std and ``exact_constant=False`` (``algo.constant_groups: rounding``), which keeps that
    group's rounding advantage on purpose. In floats the computed advantage of such a group is the
    group mean's rounding (~1e-8 in float32) wherever ``grpo``'s exact zero does not apply (``dr_grpo``,
    ``rloo``, ``grpo`` with std ``none`` or ``batch``); :func:`constant_group_rows` finds its rows."""
    if estimator not in GROUP_BASELINE_ESTIMATORS or whiten:
        return False
    if estimator == "grpo":
        return mean_scope == "group" and (exact_constant or std_scope != "group")
    return True


@torch.no_grad()
def constant_group_rows(token_rewards: torch.Tensor, mask: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """[B] bool: the rows with an active token whose group's members (its rows with an active token) all
    have the same score, the sum of their ``token_rewards`` [B, T] over ``mask`` [B, T] (exactly: the
    largest and the smallest agree). Decided from the rewards, not from the advantages, whose rounding
    can give such a group signs; pass the mask the advantages' group statistics used."""
    m = as_bool_mask(mask)
    check_same_shape(token_rewards=token_rewards, mask=m)
    score, valid, inverse, g, _, _, _ = _sequence_scores(zero_padding(token_rewards.detach(), m), m, group_ids,
                                                         "constant_group_rows")
    return valid & _all_equal(score, valid, inverse, g)[inverse]


# --------------------------------------------------------------------------------------------------
# dispatch


@torch.no_grad()
def compute_advantages(
    token_rewards: torch.Tensor,
    mask: torch.Tensor,
    group_ids: torch.Tensor | None,
    *,
    estimator: str,
    values: torch.Tensor | None = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    step_mask: torch.Tensor | None = None,
    whiten: bool = False,
    mean_scope: str = "group",
    std_scope: str = "group",
    exact_constant: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token advantages and returns from per-token rewards.

    Estimators (:data:`ADVANTAGE_ESTIMATORS`; see each function for its formula and paper):
    ``"grpo"`` ((r - mean) / (std + 1e-6), group mean and group std unless ``mean_scope`` /
    ``std_scope`` say otherwise), ``"dr_grpo"`` (r - group mean), ``"rloo"``
    (r - mean of the other members), ``"grpo_process"`` (DeepSeekMath process supervision, needs
    ``step_mask``), ``"gae"`` (needs ``values``).

    Args:
        token_rewards: [B, T] rewards placed at the tokens they credit.
        mask: [B, T], 1 on generated tokens, 0 on padding.
        group_ids: [B] prompt id of each completion (group estimators; ``gae`` accepts None).
            Groups of one completion get advantage 0 (no baseline exists), never NaN; rows without
            an active token are not counted as group members.
        estimator: a name in :data:`ADVANTAGE_ESTIMATORS`.
        values: [B, T] critic values at rollout time (``gae``).
        gamma: discount in [0, 1] (``gae``).
        lam: GAE lambda in [0, 1] (``gae``).
        step_mask: [B, T], 1 on the last token of each step (``grpo_process``).
        whiten: whiten the advantages over all active tokens of the batch (mean 0, unbiased std 1,
            ``masked_whiten``) after the estimator; returns are not whitened.
        mean_scope: ``grpo``'s mean: ``"group"`` (the row's group) or ``"batch"`` (every row given
            with an active token; pass the step's whole rollout batch).
        std_scope: ``grpo``'s divisor: ``"group"``, ``"batch"`` (the unbiased std of the sequence
            scores of every row given) or ``"none"``. Estimators outside :data:`SCOPED_ESTIMATORS`
            accept only the defaults (group, group).
        exact_constant: ``grpo``: an all-equal group gets exactly 0 (see :func:`grpo_advantages`).

    Returns:
        ``(advantages, returns)``, both [B, T], exactly 0 where ``mask`` is 0, without gradient.
        Outcome estimators return the sequence score (sum of its rewards) broadcast as returns;
        ``grpo_process`` the raw rewards-to-go; ``gae`` advantages + values (before whitening).

    Raises:
        UnknownNameError: unknown ``estimator``.
        ConfigError: a needed input is missing (``values`` for gae, ``step_mask`` for grpo_process,
            ``group_ids`` for group estimators), a reward off the step ends with grpo_process,
            ``gamma`` / ``lam`` outside [0, 1], or scopes other than (group, group) for an estimator
            that ignores them (or the refused mean batch with std group).
    """
    fn = ADVANTAGE_ESTIMATORS.get(estimator)
    scopes: dict[str, str] = {}
    if estimator in SCOPED_ESTIMATORS:
        scopes = {"mean_scope": mean_scope, "std_scope": std_scope, "exact_constant": exact_constant}
    elif (mean_scope, std_scope) != ("group", "group"):
        raise ConfigError(
            f"advantage estimator {estimator!r} ignores mean_scope / std_scope (got {mean_scope!r}, "
            f"{std_scope!r}); only {', '.join(sorted(SCOPED_ESTIMATORS))} takes them: pass the defaults "
            "(group, group) or use estimator='grpo'"
        )
    if not 0.0 <= gamma <= 1.0:
        raise ConfigError(f"gamma={gamma!r} must be in [0, 1]")
    if not 0.0 <= lam <= 1.0:
        raise ConfigError(f"lam={lam!r} must be in [0, 1]")
    check_same_shape(token_rewards=token_rewards, mask=mask, values=values, step_mask=step_mask)
    m = as_bool_mask(mask)
    rewards = zero_padding(token_rewards.detach(), m)
    vals = None if values is None else zero_padding(values.detach().to(rewards.dtype), m)
    steps = None if step_mask is None else as_bool_mask(step_mask) & m
    adv, ret = fn(rewards, m, group_ids, values=vals, gamma=gamma, lam=lam, step_mask=steps, **scopes)
    adv, ret = zero_padding(adv, m), zero_padding(ret, m)
    if whiten:
        adv = masked_whiten(adv, m)
    return adv, ret

"""Populations (train.packed): the stacked forward, decoder and backward against the models' own, and a
population's members against their solo trials: equal within 1e-5 after a step (weights and every
logged metric), for members of different configs side by side; failures stay with their member;
resumption and repeated runs are exact."""

from __future__ import annotations

import math
import threading
import warnings
from pathlib import Path

import pytest
import torch
from conftest import TINY_TRIAL
from tolerance import MODEL, assert_close
from torch import nn

from ablate.config import TrialConfig
from ablate.models import load_policy
from ablate.models.fast_decode import FastLlamaDecoder, shape_signature
from ablate.models.logprobs import position_ids_from_mask
from ablate.models.stacked import StackedDecoder, StackedLlama, stack_unsupported_reason
from ablate.train import NonFiniteError, run_trial
from ablate.train.population import DecodeGroup, Population, Request, StepCall, TrunkCall, run_population

pytestmark = pytest.mark.xdist_group("population")


def tiny(ws_cache: str, *overrides: str) -> TrialConfig:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return TrialConfig.from_overrides([*TINY_TRIAL, f"warmstart.cache_dir={ws_cache}", *overrides])


def packed(config: TrialConfig, packed: bool = True) -> TrialConfig:
    return TrialConfig.from_overrides({"train.packed": packed}, base=config)


def batch(K: int, B: int, L: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """ids [K, B, L] and a mask with left padding in row 1 and right padding in row 2."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 30, (K, B, L), generator=g)
    mask = torch.ones(K, B, L, dtype=torch.long)
    mask[:, 1, :3] = 0
    mask[:, 2, -2:] = 0
    return ids, mask


@pytest.mark.parametrize("name", ["micro-llama", "tiny-qwen2"])  # qwen2: grouped kv heads, q/k/v biases
def test_stacked_trunk_and_gradients_equal_each_models_own(name):
    models = [load_policy(name, seed=s).model for s in range(3)]
    twins = [load_policy(name, seed=s).model for s in range(3)]
    ids, mask = batch(3, 4, 12)
    hidden = StackedLlama(models).hidden(ids, mask)  # (K, B, L, H)
    weights = torch.randn(hidden.shape[-1], generator=torch.Generator().manual_seed(1))
    (hidden * mask[..., None] * weights).sum().backward()
    for k, twin in enumerate(twins):
        ref = twin.base_model(input_ids=ids[k], attention_mask=mask[k], position_ids=position_ids_from_mask(mask[k]),
                              use_cache=False).last_hidden_state
        assert_close(hidden[k] * mask[k, ..., None], ref * mask[k, ..., None], MODEL)
        (ref * mask[k, ..., None] * weights).sum().backward()
        for (n, p), q in zip(models[k].named_parameters(), twin.parameters()):
            if q.grad is None:
                assert p.grad is None or not p.grad.any(), n
                continue
            assert_close(p.grad, q.grad, MODEL, msg=n)


def test_stacked_decoder_equals_the_lean_decoder_and_members_can_leave():
    models = [load_policy("tiny-qwen2", seed=s).model.eval() for s in range(3)]
    ids, mask = batch(3, 4, 6, seed=2)
    mask[:, 2] = 1  # prompts are left-padded only
    shared = StackedDecoder(models, ids, mask, 5)
    solo = [FastLlamaDecoder(m, ids[k], mask[k], 5) for k, m in enumerate(models)]
    logits = shared.prefill()
    for k in range(3):
        assert_close(logits[k], solo[k].prefill(), MODEL)
    g = torch.Generator().manual_seed(3)
    for t in range(3):
        tokens = torch.randint(3, 30, (3, 4), generator=g)
        if t == 2:  # member 1 has finished decoding
            shared.keep(torch.tensor([0, 2]))
            tokens = tokens[[0, 2]]
            logits = shared.step(tokens)
            for j, k in enumerate([0, 2]):
                assert_close(logits[j], solo[k].step(tokens[j]), MODEL)
        else:
            logits = shared.step(tokens)
            for k in range(3):
                assert_close(logits[k], solo[k].step(tokens[k]), MODEL)


def test_which_models_stack():
    assert stack_unsupported_reason(load_policy("micro-llama", seed=0).model) is None
    assert "GPT2LMHeadModel" in stack_unsupported_reason(load_policy("tiny-gpt2", seed=0).model)
    a, b = load_policy("micro-llama", seed=0).model, load_policy("micro-llama", seed=1).model
    assert shape_signature(a) == shape_signature(b)
    assert shape_signature(a) != shape_signature(load_policy("tiny-llama", seed=0).model)


def test_the_rendezvous_groups_by_key_and_serves_the_furthest_behind_first():
    ids = torch.zeros(2, 5, dtype=torch.long)

    def trunk(signature: tuple) -> TrunkCall:
        return TrunkCall(nn.Identity(), ids, torch.ones_like(ids), 3, signature, (False, False, None))

    step = StepCall(DecodeGroup(None, [1]), torch.zeros(2, dtype=torch.long))
    reqs = [Request(0, trunk(("a",)), order=(3, 1, 1)), Request(1, step, order=(3, 0, 0)),
            Request(2, trunk(("a",)), order=(3, 1, 1)), Request(3, trunk(("c",)), order=(3, 1, 1))]
    assert [r.kind for r in reqs] == ["trunk", "step", "trunk", "trunk"]
    assert [[r.member for r in g] for g in Population.groups(reqs)] == [[0, 2], [1], [3]]
    pop = Population(members={0, 1, 2, 3}, pending={r.member: r for r in reqs})
    first = min(r.order for r in pop.pending.values())
    assert [m for m, r in pop.pending.items() if r.order == first] == [1]


#: Members of different configs in one population: every advantage estimator, aggregation, ratio
#: level, reward component and KL placement appears in at least one member.
MEMBERS = {
    "grpo token-mean": ["loss.aggregation=token-mean"],
    "dr_grpo seq-sum-norm, seq ratio": ["algo.advantage=dr_grpo", "loss.aggregation=seq-mean-token-sum-norm",
                                        "loss.ratio_level=sequence", "loss.clip_low=3e-4", "loss.clip_high=4e-4"],
    "rloo balanced, kl in reward": ["algo.advantage=rloo", "loss.aggregation=balanced-mean",
                                    "reward.components=[final_answer, kl]", "kl.placement=reward", "kl.beta=0.1"],
    "grpo_process prm, kl in loss": ["algo.advantage=grpo_process", "reward.components=[final_answer, prm]",
                                     "kl.placement=loss", "kl.beta=0.05", "loss.ratio_level=sequence_token"],
    "gae critic": ["algo.advantage=gae", "critic.enabled=true", "loss.aggregation=seq-mean-token-mean"],
    "format, partial, prompt-mean": ["reward.components=[final_answer, format, partial]",
                                     "loss.aggregation=prompt-mean", "loss.surrogate=cispo"],
    "rollout correction, two epochs": ["loss.rollout_correction=tis", "algo.ppo_epochs=2"],
    "sampler logp, top-p": ["rollout.behaviour_logp=sampler", "rollout.top_p=0.9", "optim.lr=3e-3"],
    "seq-sum, missing eos, soft overlong": ["loss.aggregation=seq-mean-token-sum",
                                            "reward.components=[final_answer, missing_eos, soft_overlong]"],
}


def _close(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-5)


def _logged(metrics: dict[str, float]) -> dict[str, float | str]:
    """The metrics without the ``perf/*`` timings, NaN as a string (so that NaN equals NaN)."""
    return {k: "nan" if math.isnan(v) else v for k, v in metrics.items() if not k.startswith("perf/")}


def _weights(workdir: Path) -> dict[str, torch.Tensor]:
    return torch.load(workdir / "trainer.pt", weights_only=False)["trainer"]["model"]


def test_a_population_step_equals_each_members_solo_step(ws_cache, tmp_path, monkeypatch):
    sizes: dict[str, int] = {}
    compute = Population.compute

    def counted(self, group):
        sizes[group[0].kind] = max(sizes.get(group[0].kind, 0), len(group))
        return compute(self, group)

    monkeypatch.setattr(Population, "compute", counted)
    names = list(MEMBERS)
    configs = [tiny(ws_cache, "train.steps=1", "train.checkpoint_every=1", f"seed={i}", *MEMBERS[n])
               for i, n in enumerate(names)]
    for c in configs:
        assert packed(c).trial_key() != c.trial_key()
    dirs = [tmp_path / f"pop{i}" for i in range(len(configs))]
    pop = run_population([packed(c) for c in configs], [None] * len(configs), dirs)
    assert sizes == dict.fromkeys(["prefill", "step", "trunk", "backward"], len(configs))  # all batched together
    for name, c, result, d in zip(names, configs, pop, dirs):
        assert not isinstance(result, BaseException), (name, result)
        solo = run_trial(c, workdir=tmp_path / f"solo-{d.name}")
        assert result.steps == solo.steps == 1
        assert [s for s, _ in result.history] == [s for s, _ in solo.history]
        for (_, m), (_, ms) in zip(result.history, solo.history):
            assert set(m) == set(ms), name
            bad = {k: (m[k], ms[k]) for k in ms if not k.startswith("perf/") and not _close(m[k], ms[k])}
            assert not bad, (name, bad)
        mine, theirs = _weights(d), _weights(tmp_path / f"solo-{d.name}")
        assert mine.keys() == theirs.keys()
        for k in theirs:
            diff = (mine[k] - theirs[k]).abs()
            # Adam's first step moves each weight by ~lr whatever the size of its gradient, so a gradient
            # within rounding of 0 may go either way: a few entries may differ, by at most 2 lr
            assert int((diff > 1e-5).sum()) <= max(1, diff.numel() // 1000), (name, k)
            assert float(diff.max()) <= 2 * c.optim.lr + 1e-5, (name, k)


def test_a_diverging_member_fails_alone_and_a_population_reruns_and_resumes_exactly(ws_cache, tmp_path):
    configs = [packed(tiny(ws_cache, "train.steps=3", f"seed={i}")) for i in range(3)]
    configs[1] = TrialConfig.from_overrides({"optim.lr": 1e30}, base=configs[1])
    whole = run_population(configs, [None] * 3, [None] * 3)
    assert isinstance(whole[1], NonFiniteError)
    again = run_population(configs, [None] * 3, [None] * 3)
    for i in (0, 2):
        assert _logged(whole[i].final) == _logged(again[i].final)
        solo = run_trial(packed(configs[i], False))  # the diverging member changed nothing for the others
        for (_, m), (_, ms) in zip(whole[i].history, solo.history):
            assert not {k for k in ms if not k.startswith("perf/") and not _close(m[k], ms[k])}
    # stopped after a step (as a killed worker leaves it), then resumed from the checkpoints
    dirs = [tmp_path / f"m{i}" for i in range(3)]
    ok = [configs[0], configs[2], packed(tiny(ws_cache, "train.steps=3", "seed=7"))]
    first = run_population(ok, [None] * 3, dirs, stop_after=1)
    assert all(r.steps == 1 for r in first)
    resumed = run_population(ok, [None] * 3, dirs)
    straight = run_population(ok, [None] * 3, [None] * 3)
    for r, s in zip(resumed, straight):
        assert r.resumed_from == 1
        for (step, m), (step2, m2) in zip(r.history, s.history):
            assert step == step2
            assert _logged(m) == _logged(m2)


def test_a_model_that_cannot_stack_trains_solo_inside_the_population(ws_cache):
    configs = [tiny(ws_cache, "model.name=tiny-gpt2", "train.steps=1", f"seed={i}") for i in range(2)]
    pop = run_population([packed(c) for c in configs], [None, None], [None, None])
    for c, r in zip(configs, pop):
        solo = run_trial(c)
        assert _logged(r.final) == _logged(solo.final)


def test_a_members_autograd_and_autocast_state_is_reproduced_where_its_calls_are_computed():
    from ablate.train.population import _amp_state, _Mode

    seen = {}

    def member():
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            seen["state"] = _amp_state(torch.device("cpu"))

    t = threading.Thread(target=member)
    t.start()
    t.join()
    assert seen["state"] == (False, True, torch.bfloat16)
    assert _amp_state(torch.device("cpu")) == (True, False, None)  # this thread's own state is untouched
    with _Mode(torch.device("cpu"), seen["state"]):
        assert not torch.is_grad_enabled() and torch.is_autocast_enabled("cpu")
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16
        assert torch.ones(2, 2).mm(torch.ones(2, 2)).dtype == torch.bfloat16
    assert torch.is_grad_enabled() and not torch.is_autocast_enabled("cpu")


def test_members_in_other_precisions_never_share_a_computation(ws_cache, monkeypatch):
    groups: list[tuple[str, int]] = []
    compute = Population.compute

    def recorded(self, group):
        groups.append((group[0].kind, len(group)))
        return compute(self, group)

    monkeypatch.setattr(Population, "compute", recorded)
    bf16 = packed(tiny(ws_cache, "train.steps=1", "model.dtype=bfloat16", "model.attention=eager"))
    fp32 = packed(tiny(ws_cache, "train.steps=1", "seed=1"))
    mixed = run_population([bf16, fp32], [None, None], [None, None])
    assert not any(isinstance(r, BaseException) for r in mixed)
    assert {n for k, n in groups if k != "backward"} == {1}, groups  # bf16 autocast and float32 calls apart
    assert ("backward", 2) in groups  # a backward has no precision of its own: they run as one
    alone = run_population([bf16], [None], [None])[0]  # so the bf16 member is what it is alone
    assert _logged(mixed[0].final) == _logged(alone.final)

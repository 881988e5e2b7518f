"""The decode loop over static buffers (ablate.models.decode_graph): on CPU nothing is captured and the
same step runs eagerly, which must sample what the ordinary loop samples. tests/test_gpu.py checks the
captured graph on CUDA."""

from __future__ import annotations

import warnings

import pytest
import torch
from test_rollout import EOS, eos_biased_policy
from tolerance import MODEL, assert_close

from ablate.config import TrialConfig
from ablate.models import Policy, load_policy
from ablate.models.decode_graph import (
    MAX_SAMPLERS,
    PROMPT_BUCKET,
    GraphSampler,
    _Shadow,
    capture_seconds,
    clear_samplers,
    graph_sampler,
    padded_width,
    samplers_for,
)
from ablate.models.fast_decode import FastLlamaDecoder
from ablate.models.precision import is_float32_head, use_float32_lm_head
from ablate.models.rollout import generate_rollouts, left_pad, sample_completions
from ablate.tasks import TASKS

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(autouse=True)
def no_samplers():
    """Each test starts without the samplers that earlier tests (in this process) left."""
    clear_samplers()
    yield
    clear_samplers()


@pytest.fixture(scope="module")
def prompts() -> list[str]:
    return [p.prompt for p in TASKS.get("addition")(difficulty=2, seed=0).sample("eval", 3, seed=0)]


def both(policy: Policy, prompts: list[str], seed: int = 3, **kw):
    """The same rollout by the ordinary loop and by the static one, and the generators' states after."""
    out = []
    for graph in (False, True):
        gen = torch.Generator().manual_seed(seed)
        r = generate_rollouts(policy, prompts, generator=gen, cuda_graph=graph, **{"group_size": 4, **kw})
        out.append((r, gen.get_state()))
    return out


def samplers(policy: Policy) -> list[GraphSampler]:
    return samplers_for(policy.model)


@pytest.mark.parametrize(("temperature", "top_p", "behaviour"),
                         [(1.0, 1.0, "recompute"), (0.7, 0.9, "sampler"), (0.0, 1.0, "recompute")])
def test_static_loop_samples_what_the_ordinary_loop_samples(prompts, temperature, top_p, behaviour):
    policy = load_policy("tiny-llama", seed=0)
    (a, state_a), (b, state_b) = both(policy, prompts, temperature=temperature, top_p=top_p, max_new_tokens=30,
                                      behaviour_logp=behaviour)
    assert torch.equal(a.completion_ids, b.completion_ids) and torch.equal(a.mask, b.mask)
    assert a.texts == b.texts and torch.equal(a.truncated, b.truncated)
    # the same uniforms drawn: the rollout's generator ends in the same state
    assert torch.equal(state_a, state_b)
    # the sampler's log-probs come from logits summed over more (masked) slots: equal up to rounding
    assert_close(a.old_logp, b.old_logp, MODEL)
    assert b.prompt_ids.shape == a.prompt_ids.shape  # the bucket's extra padding stays inside the loop
    (sampler,) = samplers(policy)
    assert sampler.P == PROMPT_BUCKET and sampler.graph is None  # CPU: nothing captured
    assert sampler.model is not policy.model and capture_seconds(policy.model) == 0.0


def test_early_stop(prompts):
    policy = eos_biased_policy(6.0)  # p(EOS) ~ 0.8 a step: rows stop at different steps, all before the budget
    (a, _), (b, _) = both(policy, prompts, max_new_tokens=40)
    assert a.completion_ids.shape[1] < 40 and torch.equal(a.completion_ids, b.completion_ids)
    assert (b.completion_ids[b.mask == 0] == policy.pad_token_id).all()
    assert (b.completion_ids[torch.arange(len(b.lengths)), b.lengths - 1] == EOS).all()


def test_a_sampler_is_reused_with_the_weights_of_the_moment(prompts):
    policy = load_policy("tiny-llama", seed=0)
    (a, _), _ = both(policy, prompts, max_new_tokens=20)
    (first,) = samplers(policy)
    with torch.no_grad():  # an optimizer step: the parameters change in place
        for p in policy.model.parameters():
            p.mul_(1.5)
    (c, _), (d, _) = both(policy, prompts, max_new_tokens=20)
    assert samplers(policy) == [first]  # the same sampler, with the new weights
    assert not torch.equal(a.completion_ids, c.completion_ids) and torch.equal(c.completion_ids, d.completion_ids)


def test_padded_width_by_hand():
    assert padded_width(9, 30, None) == 16 and padded_width(16, 30, None) == 16 and padded_width(17, 8, None) == 32
    assert padded_width(9, 30, 46) == 16 and padded_width(9, 30, 45) == 9  # the bucket would pass the positions


def test_samplers_are_kept_per_shape_and_options_at_most_max(prompts):
    policy = load_policy("micro-llama", seed=0)
    ids, mask = left_pad([policy.encode_prompt(p) for p in prompts], policy.pad_token_id)
    common = dict(width=16, max_new_tokens=4, top_p=1.0, logp_temperature=None, stop_ids=[0, 2], pad_id=0)
    a = graph_sampler(policy.model, batch=3, temperature=1.0, **common)
    assert graph_sampler(policy.model, batch=3, temperature=1.0, **common) is a
    assert graph_sampler(policy.model, batch=3, temperature=0.5, **common) is not a
    for b in range(4, 4 + MAX_SAMPLERS):
        graph_sampler(policy.model, batch=b, temperature=1.0, **common)
    assert len(samplers(policy)) == MAX_SAMPLERS and a not in samplers(policy)  # least recently used
    shadows = {id(s.shadow) for s in samplers(policy)}
    assert len(shadows) == 1  # one copy of the weights (and concatenated weights) per model shape


def test_a_sampler_serves_every_model_of_its_shape(prompts):
    """The next trial's model (same shape, other weights) samples through the sampler the first one made,
    with its own weights: what the ordinary loop samples for it."""
    first, second = load_policy("tiny-llama", seed=0), load_policy("tiny-llama", seed=1)
    (a, state_a), (b, state_b) = both(first, prompts, max_new_tokens=20)
    (c, state_c), (d, state_d) = both(second, prompts, max_new_tokens=20)
    (sampler,) = samplers(first)
    assert samplers(second) == [sampler] and sampler.model is not second.model
    assert torch.equal(c.completion_ids, d.completion_ids) and torch.equal(state_c, state_d)
    assert not torch.equal(a.completion_ids, c.completion_ids)  # the weights differ, and so do the samples
    _, (e, _) = both(first, prompts, max_new_tokens=20)  # back to the first model: its samples again
    assert torch.equal(e.completion_ids, b.completion_ids)
    micro = load_policy("micro-llama", seed=0)  # another shape: its own copy and sampler
    generate_rollouts(micro, prompts, group_size=2, max_new_tokens=4, cuda_graph=True)
    (m,) = samplers(micro)
    assert m.shadow is not sampler.shadow and samplers(first) == [sampler]
    head32 = load_policy("tiny-llama", seed=0)
    use_float32_lm_head(head32.model)  # the same weights, another head class: not the first model's copy
    generate_rollouts(head32, prompts, group_size=4, max_new_tokens=20, cuda_graph=True)
    (h,) = samplers(head32)
    assert h.shadow is not sampler.shadow and is_float32_head(h.model.get_output_embeddings())


def test_ordinary_loop_where_the_static_one_does_not_apply(prompts):
    policy = load_policy("micro-llama", seed=0)
    generate_rollouts(policy, prompts, group_size=2, max_new_tokens=4, fast=False, cuda_graph=True)
    assert not samplers(policy)  # fast=False: the generic decoder, as without cuda_graph
    gpt2 = load_policy("tiny-gpt2")  # not an architecture of the lean decoder: the generic one, no error
    r = generate_rollouts(gpt2, prompts, group_size=2, max_new_tokens=4, cuda_graph=True)
    assert r.timing["fast"] == 0.0 and not samplers(gpt2)


def test_decoder_reset_checks_the_shape_and_refuses_after_compaction(prompts):
    policy = load_policy("micro-llama", seed=0)
    ids, mask = left_pad([policy.encode_prompt(p) for p in prompts], policy.pad_token_id)
    d = FastLlamaDecoder(policy.model.eval(), ids, mask, 4)
    with pytest.raises(ValueError, match="shape"):
        d.reset(ids[:2], mask[:2])
    d.prefill()
    d.step(torch.full((3,), 5), torch.tensor([True, False, False]))  # drops the two stopped rows
    with pytest.raises(ValueError, match="dropped"):
        d.reset(ids, mask)


def test_the_option_is_in_the_trial_key_only_when_true():
    base = TrialConfig.from_overrides([])
    on = TrialConfig.from_overrides(["rollout.cuda_graph=true"])
    assert base.trial_key() == TrialConfig.from_overrides(["rollout.cuda_graph=false"]).trial_key()
    assert on.trial_key() != base.trial_key() and on.rollout.cuda_graph is True


def test_static_loop_under_bf16_autocast(prompts):
    """rollout.dtype=bfloat16 samples under autocast: the static loop writes its cache in the cache's dtype."""
    policy = load_policy("tiny-llama", seed=0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        (a, state_a), (b, state_b) = both(policy, prompts, max_new_tokens=12)
    rows = (a.completion_ids == b.completion_ids).all(-1)
    assert rows.float().mean() >= 0.9 and torch.equal(state_a, state_b)  # bf16 ties may break otherwise
    (sampler,) = samplers(policy)
    assert sampler.autocast == (True, torch.bfloat16)  # a sampler per autocast state


def test_a_failed_capture_falls_back_to_the_eager_step_with_a_warning(prompts):
    """A capture that raises (here: CUDA streams on a CPU-only torch) leaves the sampler decoding eagerly over
    the same buffers, with the same draws, and says why; the time spent is counted, and the next model
    (trial) at that shape tries the capture again, this one does not."""
    policy = load_policy("micro-llama", seed=0)
    ids, mask = left_pad([policy.encode_prompt(p) for p in prompts], policy.pad_token_id)
    ids, mask = torch.nn.functional.pad(ids, (16 - ids.shape[1], 0)), torch.nn.functional.pad(mask, (16 - mask.shape[1], 0))
    sampler = GraphSampler(_Shadow(policy.model), batch=3, width=16, max_new_tokens=6, temperature=1.0, top_p=1.0,
                           logp_temperature=None, stop_ids=[0, 2], pad_id=0, capture=True)
    gen = torch.Generator().manual_seed(1)
    with pytest.warns(RuntimeWarning, match="capturing the decode step failed"):
        out, m, steps, _ = sampler.sample(policy.model.eval(), ids, mask, gen)
    assert sampler.graph is None and "CUDA" in sampler.capture_error
    assert capture_seconds(policy.model) == sampler.capture_s > 0.0  # the failed attempt's time, logged
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same model again: no second attempt, no warning
        again, *_ = sampler.sample(policy.model, ids, mask, torch.Generator().manual_seed(1))
    assert torch.equal(again, out)
    other = load_policy("micro-llama", seed=1)
    with pytest.warns(RuntimeWarning, match="capturing the decode step failed"):  # another trial: tried again
        sampler.sample(other.model.eval(), ids, mask, torch.Generator().manual_seed(1))
    ref_gen = torch.Generator().manual_seed(1)
    ref, ref_mask, ref_steps = sample_completions(policy.model, ids, mask, max_new_tokens=6, stop_ids=[0, 2], pad_id=0,
                                                  generator=ref_gen)
    assert steps == ref_steps and torch.equal(out, ref) and torch.equal(gen.get_state(), ref_gen.get_state())

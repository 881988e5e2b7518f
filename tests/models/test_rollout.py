"""Rollouts: layout, masks and EOS, old_logp == training log-probs, determinism, fast == generic."""

from __future__ import annotations

import pytest
import torch
from tolerance import MODEL, assert_close
from transformers import GPT2Config, GPT2LMHeadModel

from ablate.errors import AblateError
from ablate.models import Policy, load_policy
from ablate.models.fast_decode import (
    FastLlamaDecoder,
    GenericDecoder,
    fast_decoder_unsupported_reason,
)
from ablate.models.logprobs import naive_token_logprobs, token_logprobs
from ablate.models.rollout import Rollout, generate_rollouts, left_pad, sample_next
from ablate.models.tokenizer import build_tokenizer
from ablate.tasks import TASKS

EOS, PAD = 2, 0


#: Tiny tensors: one intra-op thread is as fast and does not stall when the cores are shared.
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tiny() -> Policy:
    return load_policy("tiny-llama", seed=0)


@pytest.fixture(scope="module")
def prompts() -> list[str]:
    return [p.prompt for p in TASKS.get("addition")(difficulty=2, seed=0).sample("eval", 3, seed=0)]


def rollout(policy, prompts, seed=0, **kw) -> Rollout:
    kw.setdefault("group_size", 4)
    kw.setdefault("max_new_tokens", 40)
    return generate_rollouts(policy, prompts, generator=torch.Generator().manual_seed(seed), **kw)


def test_left_pad_by_hand():
    ids, mask = left_pad([[5, 6], [7], [8, 9, 10]], pad_id=0)
    assert ids.tolist() == [[0, 5, 6], [0, 0, 7], [8, 9, 10]]
    assert mask.tolist() == [[0, 1, 1], [0, 0, 1], [1, 1, 1]]


def test_layout_masks_eos_and_truncation(tiny, prompts):
    r = rollout(tiny, prompts + ["1+2="], group_size=8)
    B, T = r.completion_ids.shape
    assert B == 32 and T == 40 and r.timing["steps"] == 40 and r.timing["fast"] == 1.0
    assert r.group_ids.tolist() == [g for g in range(4) for _ in range(8)]
    # prompts: left-padded rendering of each prompt, repeated G times
    P = r.num_prompt_tokens
    for b in range(B):
        enc = tiny.encode_prompt(r.prompts[int(r.group_ids[b])])
        assert r.prompt_ids[b, P - len(enc):].tolist() == enc
        assert r.prompt_mask[b].tolist() == [0] * (P - len(enc)) + [1] * len(enc)
        assert (r.prompt_ids[b, : P - len(enc)] == PAD).all()
    stopped = 0
    for b in range(B):
        row, m = r.completion_ids[b].tolist(), r.mask[b].tolist()
        # a row stops at its first EOS (or pad: the tokenizer's pad id also ends a completion)
        stops = [i for i, t in enumerate(row) if t in (EOS, PAD)]
        if stops:
            stopped += 1
            e = stops[0]
            assert m == [1.0] * (e + 1) + [0.0] * (T - e - 1)  # the mask covers the EOS
            assert row[e + 1 :] == [PAD] * (T - e - 1)  # all pad after it
            assert not r.truncated[b]
        else:
            assert m == [1.0] * T and r.truncated[b]
        assert r.lengths[b] == sum(m)
        text, offsets = tiny.decode_with_offsets(row)
        assert r.texts[b] == text and r.offsets[b] == offsets and len(offsets) == T
    # the random model stops some rows and not others within 40 tokens (deterministic for this seed)
    assert 0 < stopped < B
    assert r.timing["tokens"] == r.mask.sum().item()
    assert r.input_ids.shape == r.attention_mask.shape == (B, P + T)


def eos_biased_policy(bias: float) -> Policy:
    """micro-llama whose head adds ``bias`` to the EOS logit: rows stop early and at different steps."""
    policy = load_policy("micro-llama")
    old = policy.model.get_output_embeddings()
    head = torch.nn.Linear(old.in_features, old.out_features, bias=True)
    with torch.no_grad():
        head.weight.copy_(old.weight)
        head.bias.zero_()
        head.bias[EOS] = bias
    policy.model.lm_head = head
    return policy


def test_early_exit_when_every_row_has_stopped(prompts):
    # p(EOS) ~ 0.8 per step: every row stops within a few tokens and the loop ends before the budget
    policy = eos_biased_policy(6.0)
    r = rollout(policy, prompts, max_new_tokens=40)
    T = r.completion_ids.shape[1]
    assert T < 40 and T == r.timing["steps"]
    assert not r.truncated.any()
    last = r.lengths - 1
    assert (r.completion_ids[torch.arange(len(last)), last] == EOS).all()


def test_lean_decoder_drops_stopped_rows_and_keeps_the_samples(prompts):
    # p(EOS) ~ 0.15 per step: rows stop at many different steps, so the lean decoder compacts its
    # cache several times; the samples must still equal the generic decoder's
    policy = eos_biased_policy(2.8)
    a = rollout(policy, prompts, seed=4, fast=True, group_size=8, max_new_tokens=30)
    b = rollout(policy, prompts, seed=4, fast=False, group_size=8, max_new_tokens=30)
    assert torch.equal(a.completion_ids, b.completion_ids) and torch.equal(a.mask, b.mask)
    assert 4 < int((a.lengths < 10).sum()) < 20
    # decoder level: after compaction, the logits of the rows still computed equal the generic ones
    ids, mask = left_pad([policy.encode_prompt(p) for p in prompts * 4], PAD)
    fast, generic = FastLlamaDecoder(policy.model, ids, mask, 8), GenericDecoder(policy.model, ids, mask, 8)
    active = torch.ones(12, dtype=torch.bool)
    with torch.no_grad():
        fast.prefill(), generic.prefill()
        for step in range(6):
            tokens = torch.full((12,), 40 + step)
            active[step * 2 : step * 2 + 2] = False  # two more rows stop at each step
            lf, lg = fast.step(tokens, active), generic.step(tokens, active)
            computed = torch.zeros(12, dtype=torch.bool)
            computed[fast.rows if fast.rows is not None else slice(None)] = True
            assert_close(lf[computed], lg[computed], MODEL)
            assert (lf[~computed] == 0).all() and not (active & ~computed).any()
    assert fast.rows is not None and fast.rows.tolist() == list(range(10, 12))


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_old_logp_equals_the_training_forward(tiny, prompts, temperature):
    r = rollout(tiny, prompts, temperature=temperature)
    assert r.logp_temperature == temperature
    model = tiny.model
    model.train()  # the trainer's mode; the zoo models have no dropout
    logp = token_logprobs(model, r.input_ids, r.attention_mask, num_prompt_tokens=r.num_prompt_tokens,
                          temperature=temperature)
    model.eval()
    ratio = torch.exp(logp - r.old_logp)
    assert_close(ratio[r.mask > 0], torch.ones_like(ratio[r.mask > 0]), MODEL)
    naive = naive_token_logprobs(model, r.input_ids, r.attention_mask, num_prompt_tokens=r.num_prompt_tokens,
                                 temperature=temperature)
    assert_close(r.old_logp, naive, MODEL)
    assert (r.old_logp[r.mask == 0] == 0).all() and (r.old_logp[r.mask > 0] < 0).all()


def test_rollout_without_the_behaviour_forward(tiny, prompts):
    a = rollout(tiny, prompts, seed=2)
    b = rollout(tiny, prompts, seed=2, compute_old_logp=False)
    assert b.old_logp is None and torch.equal(a.completion_ids, b.completion_ids) and a.texts == b.texts


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("fast", [None, False])
def test_sampler_behaviour_logp_equals_the_recomputed_up_to_rounding(tiny, prompts, temperature, fast):
    """behaviour_logp="sampler": the same samples (the draws do not change), and old_logp from the decode
    loop's logits within float rounding of the forward's (lean and generic decoder, two temperatures)."""
    a = rollout(tiny, prompts, seed=3, temperature=temperature, fast=fast)
    b = rollout(tiny, prompts, seed=3, temperature=temperature, fast=fast, behaviour_logp="sampler")
    assert torch.equal(a.completion_ids, b.completion_ids) and torch.equal(a.mask, b.mask)
    assert b.timing["logprob_s"] < a.timing["logprob_s"]  # no forward after sampling
    assert (b.old_logp[b.mask == 0] == 0).all() and (b.old_logp[b.mask > 0] < 0).all()
    assert_close(b.old_logp, a.old_logp, MODEL)
    assert not torch.equal(b.old_logp, a.old_logp) or fast is False  # a different kernel: rounding differs
    # the first token of each row by hand: log_softmax(logits / T) of the prompt's last position
    with torch.no_grad():
        logits = tiny.model(input_ids=a.prompt_ids, attention_mask=a.prompt_mask).logits[:, -1].float()
    first = torch.log_softmax(logits / temperature, -1).gather(-1, a.completion_ids[:, :1]).squeeze(-1)
    assert_close(b.old_logp[:, 0], first, MODEL)


def test_sampler_behaviour_logp_of_a_greedy_rollout_is_at_temperature_one(tiny, prompts):
    a = rollout(tiny, prompts, temperature=0.0, group_size=1)
    b = rollout(tiny, prompts, temperature=0.0, group_size=1, behaviour_logp="sampler")
    assert b.logp_temperature == 1.0 and torch.equal(a.completion_ids, b.completion_ids)
    assert_close(b.old_logp, a.old_logp, MODEL)


def test_same_seed_same_rollout_other_seed_differs(tiny, prompts):
    a, b, c = rollout(tiny, prompts, seed=7), rollout(tiny, prompts, seed=7), rollout(tiny, prompts, seed=8)
    assert torch.equal(a.completion_ids, b.completion_ids) and torch.equal(a.old_logp, b.old_logp)
    assert a.texts == b.texts
    assert not torch.equal(a.completion_ids, c.completion_ids)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2"])
def test_fast_decoder_logits_and_samples_equal_generic(name, prompts):
    policy = load_policy(name, seed=1)
    assert fast_decoder_unsupported_reason(policy.model) is None
    # logits, step by step, on left-padded prompts
    ids, mask = left_pad([policy.encode_prompt(p) for p in prompts + ["7+5="]], PAD)
    fast, generic = FastLlamaDecoder(policy.model, ids, mask, 6), GenericDecoder(policy.model, ids, mask, 6)
    with torch.no_grad():
        lf, lg = fast.prefill(), generic.prefill()
        for _ in range(6):
            assert_close(lf, lg, MODEL)
            tokens = lg.argmax(-1)
            lf, lg = fast.step(tokens), generic.step(tokens)
    # sampled tokens, same generator
    a = rollout(policy, prompts, seed=3, fast=True, max_new_tokens=24)
    b = rollout(policy, prompts, seed=3, fast=False, max_new_tokens=24)
    assert a.timing["fast"] == 1.0 and b.timing["fast"] == 0.0
    assert torch.equal(a.completion_ids, b.completion_ids)
    assert torch.equal(a.old_logp, b.old_logp)
    g1 = rollout(policy, prompts, temperature=0.0, fast=True, max_new_tokens=24)
    g2 = rollout(policy, prompts, temperature=0.0, fast=False, max_new_tokens=24)
    assert torch.equal(g1.completion_ids, g2.completion_ids)


def test_gpt2_falls_back_to_the_generic_decoder(prompts):
    policy = load_policy("tiny-gpt2")
    assert "GPT2LMHeadModel" in fast_decoder_unsupported_reason(policy.model)
    r = rollout(policy, prompts, max_new_tokens=12)
    assert r.timing["fast"] == 0.0 and r.completion_ids.shape == (12, 12)
    with pytest.raises(AblateError, match="fast=True.*GPT2LMHeadModel"):
        rollout(policy, prompts, fast=True)


def test_tiny_top_p_is_greedy(tiny, prompts):
    greedy = rollout(tiny, prompts, temperature=0.0, group_size=2)
    nucleus = rollout(tiny, prompts, temperature=1.0, top_p=1e-6, group_size=2)
    assert torch.equal(greedy.completion_ids, nucleus.completion_ids)
    assert greedy.logp_temperature == 1.0
    # greedy rows of the same prompt are identical
    assert torch.equal(greedy.completion_ids[0::2], greedy.completion_ids[1::2])


def test_sample_next_by_hand():
    probs = torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]])
    logits = probs.log()
    assert sample_next(logits, temperature=0.0).tolist() == [0, 2]
    g = torch.Generator().manual_seed(0)
    draws = torch.stack([sample_next(logits.repeat(500, 1)[:1000], temperature=1.0, top_p=0.6, generator=g)])
    # nucleus 0.6: row 0 keeps {0, 1} (0.5 < 0.6 <= 0.8), row 1 keeps {2} alone (0.8 >= 0.6)
    row0, row1 = draws[0, 0::2], draws[0, 1::2]
    assert set(row0.tolist()) == {0, 1} and set(row1.tolist()) == {2}
    # renormalised 0.5 : 0.3 -> P(0) = 0.625; 500 draws, 4 standard deviations ~ 0.087
    assert abs((row0 == 0).float().mean().item() - 0.625) < 0.09
    # temperature 2 flattens: P(0) = sqrt(.5)/(sqrt(.5)+sqrt(.3)+sqrt(.2)) = 0.4199
    d = sample_next(logits[:1].repeat(4000, 1), temperature=2.0, generator=g)
    assert abs((d == 0).float().mean().item() - 0.4199) < 0.035


def test_dropout_model_samples_in_eval_mode_and_mode_is_restored(prompts):
    torch.manual_seed(0)
    tok = build_tokenizer()
    cfg = GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=128, vocab_size=len(tok), resid_pdrop=0.5,
                     embd_pdrop=0.5, attn_pdrop=0.5, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    policy = Policy(GPT2LMHeadModel(cfg), tok, "dropout-gpt2")
    policy.model.train()
    a, b = rollout(policy, prompts, seed=5), rollout(policy, prompts, seed=5)
    assert policy.model.training  # restored
    # dropout would draw from the global RNG and make the two runs differ
    assert torch.equal(a.completion_ids, b.completion_ids) and torch.equal(a.old_logp, b.old_logp)
    policy.model.eval()
    ref = token_logprobs(policy.model, a.input_ids, a.attention_mask, num_prompt_tokens=a.num_prompt_tokens)
    assert torch.equal(ref, a.old_logp)


def test_argument_errors_name_the_argument(tiny, prompts):
    with pytest.raises(AblateError, match="group_size=0"):
        rollout(tiny, prompts, group_size=0)
    with pytest.raises(AblateError, match="max_new_tokens=0"):
        rollout(tiny, prompts, max_new_tokens=0)
    with pytest.raises(AblateError, match="top_p=0"):
        rollout(tiny, prompts, top_p=0.0)
    with pytest.raises(AblateError, match="temperature=-1"):
        rollout(tiny, prompts, temperature=-1.0)
    with pytest.raises(AblateError, match="behaviour_logp='engine'"):
        rollout(tiny, prompts, behaviour_logp="engine")
    with pytest.raises(AblateError, match="prompts is empty"):
        rollout(tiny, [])
    with pytest.raises(AblateError, match="256 positions"):
        rollout(tiny, prompts, max_new_tokens=250)

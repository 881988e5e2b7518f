"""token_logprobs: equal to the naive log-softmax + gather, with gradients, chunked, padding-invariant."""

from __future__ import annotations

import math

import pytest
import torch
from tolerance import MODEL, assert_close
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

from ablate.errors import AblateError
from ablate.models import load_policy
from ablate.models.logprobs import (
    _uses_hidden_path,
    naive_token_logprobs,
    position_ids_from_mask,
    token_logprobs,
    token_logprobs_and_entropy,
)

#: Tiny tensors: one intra-op thread is as fast and does not stall when the cores are shared.
pytestmark = pytest.mark.usefixtures("one_thread")


def rollout_batch(vocab: int, B: int = 5, P: int = 6, T: int = 7, seed: int = 0):
    """Random ids in the rollout layout: prompts left-padded to P, completions right-padded to T."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, vocab, (B, P + T), generator=g)
    mask = torch.ones(B, P + T, dtype=torch.long)
    prompt_lens = [6, 3, 5, 1, 6][:B]
    comp_lens = [7, 2, 0, 5, 4][:B]
    for b in range(B):
        mask[b, : P - prompt_lens[b]] = 0
        mask[b, P + comp_lens[b] :] = 0
    ids = ids.masked_fill(mask == 0, 0)
    return ids, mask, P


def neox_model() -> GPTNeoXForCausalLM:
    """A real architecture outside HIDDEN_PATH_MODEL_TYPES: exercises the full-logits path."""
    torch.manual_seed(0)
    cfg = GPTNeoXConfig(vocab_size=104, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=128, max_position_embeddings=64, pad_token_id=0)
    return GPTNeoXForCausalLM(cfg).eval()


MODELS = {
    "tiny-llama": lambda: load_policy("tiny-llama").model,
    "tiny-qwen2": lambda: load_policy("tiny-qwen2").model,
    "tiny-gpt2": lambda: load_policy("tiny-gpt2").model,
    "gpt-neox (full-logits path)": neox_model,
}


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_logprobs_and_gradients_equal_naive(name, temperature):
    model = MODELS[name]()
    assert _uses_hidden_path(model) == ("neox" not in name)
    ids, mask, P = rollout_batch(model.config.vocab_size)
    naive = naive_token_logprobs(model, ids, mask, num_prompt_tokens=P, temperature=temperature)
    weights = torch.randn(naive.shape, generator=torch.Generator().manual_seed(1))
    (naive * weights).sum().backward()
    ref_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    for chunk in (1, 3, None):
        model.zero_grad(set_to_none=True)
        ours = token_logprobs(model, ids, mask, num_prompt_tokens=P, temperature=temperature, chunk_size=chunk)
        assert ours.shape == (5, 7) and ours.dtype == torch.float32
        assert_close(ours, naive, MODEL)
        assert (ours[mask[:, P:] == 0] == 0).all()
        (ours * weights).sum().backward()
        grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
        assert grads.keys() == ref_grads.keys()
        for n, g in grads.items():
            assert_close(g, ref_grads[n], MODEL, msg=n)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2", "tiny-gpt2"])
def test_eager_attention_gives_the_sdpa_logprobs_and_gradients(name):
    """model.attention=eager: left-padded prompts, right-padded completions, float32: the same log-probs,
    entropies and gradients as sdpa to float rounding (the kernels differ, so not bitwise)."""
    ids, mask, P = rollout_batch(load_policy(name).model.config.vocab_size)
    weights = torch.randn(5, 7, generator=torch.Generator().manual_seed(1))
    out = {}
    for impl in ("sdpa", "eager"):
        model = load_policy(name).model
        model.set_attn_implementation(impl)
        assert model.config._attn_implementation == impl
        lp, ent = token_logprobs_and_entropy(model, ids, mask, num_prompt_tokens=P)
        assert torch.isfinite(lp).all() and torch.isfinite(ent).all()
        (lp * weights + ent).sum().backward()
        out[impl] = (lp.detach(), ent.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None})
    (lp_s, ent_s, g_s), (lp_e, ent_e, g_e) = out["sdpa"], out["eager"]
    assert_close(lp_e, lp_s, MODEL)
    assert_close(ent_e, ent_s, MODEL)
    assert g_e.keys() == g_s.keys()
    for n, g in g_e.items():
        assert_close(g, g_s[n], MODEL, msg=n)


def test_zero_model_gives_uniform_logprob_and_entropy_by_hand():
    # all weights zero -> all logits zero -> every token has log-prob -log(V), entropy log(V),
    # whatever the temperature
    model = load_policy("micro-llama").model
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    ids, mask, P = rollout_batch(104)
    logp, ent = token_logprobs_and_entropy(model, ids, mask, num_prompt_tokens=P, temperature=0.5)
    active = mask[:, P:] == 1
    assert_close(logp[active], torch.full_like(logp[active], -math.log(104)), MODEL)
    assert_close(ent[active], torch.full_like(ent[active], math.log(104)), MODEL)
    assert (logp[~active] == 0).all() and (ent[~active] == 0).all()


@pytest.mark.parametrize("name", ["tiny-qwen2", "gpt-neox (full-logits path)"])
def test_entropy_and_its_gradient_equal_naive(name):
    model = MODELS[name]()
    ids, mask, P = rollout_batch(104)
    g = torch.Generator().manual_seed(2)
    w_logp, w_ent = torch.randn(5, 7, generator=g), torch.randn(5, 7, generator=g)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask)).logits
    lp_all = torch.log_softmax(logits[:, P - 1 : -1].float() / 0.8, -1)
    naive_ent = -(lp_all.exp() * lp_all).sum(-1) * mask[:, P:]
    naive_logp = lp_all.gather(-1, ids[:, P:, None]).squeeze(-1) * mask[:, P:]
    (naive_logp * w_logp + naive_ent * w_ent).sum().backward()
    ref = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    logp, ent = token_logprobs_and_entropy(model, ids, mask, num_prompt_tokens=P, temperature=0.8, chunk_size=4)
    assert_close(ent, naive_ent, MODEL)
    assert_close(logp, naive_logp, MODEL)
    assert_close(logp, token_logprobs(model, ids, mask, num_prompt_tokens=P, temperature=0.8), MODEL)
    (logp * w_logp + ent * w_ent).sum().backward()
    for n, p in model.named_parameters():
        if p.grad is not None:
            assert_close(p.grad, ref[n], MODEL, msg=n)


def test_position_ids_ignore_left_padding():
    mask = torch.tensor([[0, 0, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]])
    assert position_ids_from_mask(mask).tolist() == [[0, 0, 0, 1, 2, 2], [0, 1, 2, 3, 4, 5]]


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gpt2"])
def test_left_padded_prompt_gives_the_same_logprobs_as_unpadded(name):
    model = load_policy(name).model
    prompt, completion = [1, 20, 21, 22], [30, 31, 32, 2]
    alone = torch.tensor([prompt + completion])
    lp_alone = token_logprobs(model, alone, torch.ones_like(alone), num_prompt_tokens=4)
    padded = torch.tensor([[0, 0, 0] + prompt + completion])
    pmask = torch.tensor([[0, 0, 0] + [1] * 8])
    lp_padded = token_logprobs(model, padded, pmask, num_prompt_tokens=7)
    assert_close(lp_alone, lp_padded, MODEL)
    # and inside a batch next to a longer prompt, right-padded completion
    other = [1] + list(range(40, 46)) + [50, 51, 52, 53]
    batch = torch.tensor([padded[0].tolist(), other])
    bmask = torch.tensor([pmask[0].tolist(), [1] * 11])
    lp_batch = token_logprobs(model, batch, bmask, num_prompt_tokens=7)
    assert_close(lp_batch[0], lp_alone[0], MODEL)


def test_errors_name_the_argument():
    model = load_policy("micro-llama").model
    ids, mask, P = rollout_batch(104)
    with pytest.raises(AblateError, match="num_prompt_tokens=0"):
        token_logprobs(model, ids, mask, num_prompt_tokens=0)
    with pytest.raises(AblateError, match="temperature=0"):
        token_logprobs(model, ids, mask, num_prompt_tokens=P, temperature=0)
    with pytest.raises(AblateError, match="attention_mask"):
        token_logprobs(model, ids, mask[:, 1:], num_prompt_tokens=P)
    with pytest.raises(AblateError, match="chunk_size=0"):
        token_logprobs(model, ids, mask, num_prompt_tokens=P, chunk_size=0)

"""The float32 LM head (model.lm_head_dtype=float32): float32 logits under bfloat16 autocast on every
path (the model's forward, the chunked log-probs and their gradients), same parameters and state dict."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from test_logprobs import MODELS, rollout_batch
from tolerance import MODEL, assert_close

from ablate.errors import AblateError
from ablate.models.logprobs import naive_token_logprobs, token_logprobs
from ablate.models.precision import Float32Linear, is_float32_head, use_float32_lm_head

pytestmark = pytest.mark.usefixtures("one_thread")


def bf16():
    return torch.autocast(device_type="cpu", dtype=torch.bfloat16)


def test_the_head_keeps_its_parameters_and_computes_in_float32():
    model = MODELS["tiny-llama"]()
    before = model.state_dict()
    weight = model.get_output_embeddings().weight
    use_float32_lm_head(model)
    head = model.get_output_embeddings()
    assert isinstance(head, Float32Linear) and is_float32_head(head) and head.weight is weight
    assert model.state_dict().keys() == before.keys()
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    x = torch.randn(3, weight.shape[1]).to(torch.bfloat16)
    with bf16():
        out = head(x)
        plain = F.linear(x, weight)  # what an ordinary head gives under autocast
    assert out.dtype == torch.float32 and plain.dtype == torch.bfloat16
    assert torch.equal(out, F.linear(x.float(), weight))
    assert not is_float32_head(copy.deepcopy(MODELS["tiny-llama"]()).get_output_embeddings())


@pytest.mark.parametrize("name", ["tiny-llama", "gpt-neox (full-logits path)"])
def test_logprobs_under_bf16_autocast_use_the_float32_head_with_gradients(name):
    model = MODELS[name]()
    ids, mask, P = rollout_batch(model.config.vocab_size)
    fp32 = copy.deepcopy(model)
    use_float32_lm_head(fp32)
    with bf16():
        ours = token_logprobs(fp32, ids, mask, num_prompt_tokens=P)
        naive = naive_token_logprobs(fp32, ids, mask, num_prompt_tokens=P)  # the model's own forward
        plain = token_logprobs(model, ids, mask, num_prompt_tokens=P)
    assert_close(ours, naive, MODEL)
    assert not torch.equal(ours, plain)  # the bf16 head rounds the logits
    ours.sum().backward()
    grad = fp32.get_output_embeddings().weight.grad
    assert grad is not None and grad.dtype == torch.float32 and bool(torch.isfinite(grad).all())
    assert float(grad.abs().sum()) > 0


def test_a_model_without_a_linear_head_is_refused():
    with pytest.raises(AblateError, match="model.lm_head_dtype=null"):
        use_float32_lm_head(torch.nn.Linear(2, 2))

from __future__ import annotations

import json

import pytest
import torch

from ablate.errors import AblateError, UnknownNameError
from ablate.models import DEFAULT_MODEL, MODELS, Policy, ZooEntry, load_policy
from ablate.models.tokenizer import build_tokenizer
from ablate.registry import BUILTIN_MODEL_POSITIONS, BUILTIN_NAMES

BUILT = [name for name, entry in MODELS.items() if not entry.pretrained]


def test_zoo_has_three_architectures_and_sizes_from_02m_to_10m():
    archs = {MODELS.get(n).architecture for n in BUILT}
    assert {"LlamaForCausalLM", "GPT2LMHeadModel", "Qwen2ForCausalLM"} <= archs
    counts = [MODELS.get(n).num_parameters() for n in BUILT]
    assert min(counts) < 300_000 and max(counts) > 8_000_000
    assert DEFAULT_MODEL == "tiny-llama" in MODELS


def test_tiny_llama_parameter_count_by_hand():
    # embeddings 104 x 128 (tied with the head) + 4 layers x (q,k,v,o 4 x 128^2 + gate,up,down
    # 3 x 128 x 344 + two RMSNorms 2 x 128) + final RMSNorm 128
    per_layer = 4 * 128 * 128 + 3 * 128 * 344 + 2 * 128
    assert MODELS.get("tiny-llama").num_parameters() == 104 * 128 + 4 * per_layer + 128 == 804_992
    cfg = load_policy("tiny-llama").model.config
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads) == (4, 128, 4)
    assert (cfg.intermediate_size, cfg.max_position_embeddings, cfg.tie_word_embeddings) == (344, 256, True)


def test_tiny_qwen2_parameter_count_by_hand():
    # q: 128x128 + bias 128, k and v: 128x64 + bias 64 (2 key-value heads of 32), o: 128x128
    attn = (128 * 128 + 128) + 2 * (128 * 64 + 64) + 128 * 128
    per_layer = attn + 3 * 128 * 344 + 2 * 128
    assert MODELS.get("tiny-qwen2").num_parameters() == 104 * 128 + 4 * per_layer + 128 == 740_480


@pytest.mark.parametrize("name", BUILT)
def test_declared_positions_are_the_zoo_configs(name):
    """Validation checks rollout.max_new_tokens against BUILTIN_MODEL_POSITIONS without torch: the same numbers."""
    cfg = MODELS.get(name).make_config(build_tokenizer())
    positions = getattr(cfg, "max_position_embeddings", None) or cfg.n_positions
    assert BUILTIN_MODEL_POSITIONS[name] == positions
    assert sorted(BUILTIN_MODEL_POSITIONS) == sorted(BUILTIN_NAMES["model"])


@pytest.mark.parametrize("name", BUILT)
def test_every_zoo_model_builds_runs_and_fits_its_band(name):
    entry: ZooEntry = MODELS.get(name)
    policy = entry.build(seed=0)
    assert isinstance(policy, Policy) and policy.name == name and not policy.use_chat_template
    model = policy.model
    assert type(model).__name__ == entry.architecture
    assert not model.training
    assert model.config._attn_implementation == "sdpa"
    n = sum(p.numel() for p in model.parameters())
    assert n == entry.num_parameters()
    low, high = entry.size_band
    assert low <= n <= high, (name, n, entry.size_band)
    vocab = len(build_tokenizer())
    assert model.config.vocab_size == vocab
    ids = torch.tensor([policy.encode_prompt("12+34="), policy.encode_prompt("7+8=") + [0, 0]])
    with torch.no_grad():
        logits = model(ids).logits
    assert logits.shape == (2, 7, vocab)
    assert torch.isfinite(logits).all()
    assert policy.eos_token_id == 2 and policy.pad_token_id == 0


def test_seeded_build_is_deterministic_and_leaves_global_rng_alone():
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    a = load_policy("tiny-llama", seed=7)
    assert torch.equal(torch.rand(3), expected_next)  # the global RNG was not consumed
    b = load_policy("tiny-llama", seed=7)
    c = load_policy("tiny-llama", seed=8)
    sa, sb, sc = a.model.state_dict(), b.model.state_dict(), c.model.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["model.layers.0.self_attn.q_proj.weight"], sc["model.layers.0.self_attn.q_proj.weight"])


def test_dtype_and_device_options():
    policy = load_policy("micro-llama", dtype=torch.bfloat16, device="auto")
    assert policy.model.dtype == torch.bfloat16
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert policy.device.type == expected


def test_unknown_name_lists_zoo_names():
    with pytest.raises(UnknownNameError) as info:
        load_policy("tiny-lama")
    msg = str(info.value)
    assert "tiny-llama" in msg and "tiny-gpt2" in msg and "smollm2-135m" in msg
    assert "did you mean 'tiny-llama'" in msg
    assert "checkpoint directory" in msg


def test_directory_that_is_not_a_checkpoint(tmp_path):
    with pytest.raises(AblateError, match="not a Hugging Face checkpoint directory"):
        load_policy(tmp_path)


def test_decode_with_offsets_on_the_char_tokenizer():
    policy = load_policy("micro-llama")
    tok = policy.tokenizer
    ids = tok.encode("<think>1+2</think><answer>3</answer>", add_special_tokens=False) + [2, 0, 0]
    text, offsets = policy.decode_with_offsets(ids)
    assert text == "<think>1+2</think><answer>3</answer>"
    assert offsets == [(0, 7), (7, 8), (8, 9), (9, 10), (10, 18), (18, 26), (26, 27), (27, 36), (36, 36),
                       (36, 36), (36, 36)]
    assert policy.encode_prompt("1+2") == [1, 21, 15, 22]


def test_ablate_models_json_lists_every_entry_with_counts(capsys):
    from ablate.cli import main

    assert main(["models", "--json"]) == 0
    models = json.loads(capsys.readouterr().out)["models"]
    by_name = {m["name"]: m for m in models}
    assert list(by_name) == MODELS.names()
    assert by_name["tiny-llama"] == {
        "name": "tiny-llama",
        "architecture": "LlamaForCausalLM",
        "params": 804_992,
        "pretrained": False,
        "default": True,
        "description": MODELS.get("tiny-llama").description,
    }
    assert by_name["smollm2-135m"]["params"] == 134_515_008 and by_name["smollm2-135m"]["pretrained"]
    assert by_name["tiny-qwen2"]["params"] == 740_480


def test_ablate_models_table(capsys):
    from ablate.cli import main

    assert main(["models"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NAME", "ARCHITECTURE", "PARAMS", "DESCRIPTION"]
    assert lines[2].split()[:4] == ["tiny-llama", "*", "LlamaForCausalLM", "0.80M"]
    assert any(line.split()[:3] == ["smollm2-135m", "LlamaForCausalLM", "134.5M"] for line in lines)

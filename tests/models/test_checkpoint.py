from __future__ import annotations

import json

import pytest
import torch
from tolerance import MODEL, assert_close
from transformers import AutoModelForCausalLM, AutoTokenizer

from ablate.errors import AblateError
from ablate.models import MODELS, load_checkpoint, load_policy, save_policy
from ablate.models.checkpoint import POLICY_FILE, TOKENIZER_PROBE, default_cache_root, is_checkpoint_dir

BUILT = [name for name, entry in MODELS.items() if not entry.pretrained]
IDS = torch.tensor([[1, 21, 15, 22, 33, 100, 23, 101], [1, 30, 31, 32, 33, 102, 24, 103]])


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(IDS).logits


@pytest.mark.parametrize("name", BUILT)
def test_save_and_load_back_gives_identical_logits(name, tmp_path):
    policy = load_policy(name, seed=3)
    out = save_policy(policy, tmp_path / "ckpt")
    assert is_checkpoint_dir(out)
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    loaded = load_policy(str(out))
    assert type(loaded.model) is type(policy.model)
    assert loaded.name == name and loaded.use_chat_template is False
    assert loaded.model.dtype == torch.float32 and not loaded.model.training
    assert torch.equal(_logits(loaded.model), _logits(policy.model))
    assert loaded.tokenizer.get_vocab() == policy.tokenizer.get_vocab()
    assert loaded.encode_prompt("12+3") == policy.encode_prompt("12+3")


def test_checkpoint_loads_with_plain_transformers(tmp_path):
    policy = load_policy("tiny-llama", seed=1)
    save_policy(policy, tmp_path)
    model = AutoModelForCausalLM.from_pretrained(tmp_path, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    assert torch.equal(_logits(model.eval()), _logits(policy.model))
    assert tok.decode(tok.encode("<answer>12+3</answer>", add_special_tokens=False)) == "<answer>12+3</answer>"
    meta = json.loads((tmp_path / POLICY_FILE).read_text())
    probe = {"text": TOKENIZER_PROBE, "ids": policy.tokenizer.encode(TOKENIZER_PROBE, add_special_tokens=False)}
    assert meta == {"name": "tiny-llama", "use_chat_template": False, "tokenizer_probe": probe}


def test_foreign_checkpoint_without_policy_file(tmp_path):
    """A directory written by plain save_pretrained (no ablate metadata) loads the same way."""
    policy = load_policy("tiny-qwen2", seed=2)
    policy.model.save_pretrained(tmp_path)
    policy.tokenizer.save_pretrained(tmp_path)
    loaded = load_checkpoint(tmp_path, dtype=torch.float64)
    assert loaded.name == str(tmp_path)
    assert loaded.use_chat_template is False  # the char tokenizer has no chat template
    assert loaded.model.dtype == torch.float64
    assert_close(_logits(loaded.model).float(), _logits(policy.model), MODEL)


def test_checkpoint_with_chat_template_renders_through_it(tmp_path):
    policy = load_policy("micro-llama")
    policy.tokenizer.chat_template = "{% for m in messages %}<think>{{ m['content'] }}</think>{% endfor %}"
    policy.model.save_pretrained(tmp_path)
    policy.tokenizer.save_pretrained(tmp_path)
    loaded = load_policy(str(tmp_path))
    assert loaded.use_chat_template is True
    assert loaded.encode_prompt("1+2") == [100, 21, 15, 22, 101]


def test_directory_without_weights_is_an_ablate_error(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(AblateError, match="cannot load the checkpoint"):
        load_checkpoint(tmp_path)


def test_default_cache_root(monkeypatch, tmp_path):
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "env"))
    assert default_cache_root() == tmp_path / "env"
    assert default_cache_root(tmp_path / "arg") == tmp_path / "arg"
    monkeypatch.delenv("ABLATE_CACHE")
    assert str(default_cache_root()).endswith(".cache/ablate")

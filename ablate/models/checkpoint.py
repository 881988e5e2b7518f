"""Local Hugging Face checkpoints: save a :class:`Policy`, load any causal-LM checkpoint directory.

A checkpoint directory is what ``save_pretrained`` writes for a model and its tokenizer
(``config.json``, ``model.safetensors``, ``tokenizer.json``, ...), so a checkpoint that
:func:`save_policy` writes loads with plain ``AutoModelForCausalLM`` / ``AutoTokenizer`` too, and
any local checkpoint (a downloaded ``Qwen2.5-0.5B-Instruct``, the SmolLM2 cache) loads through
:func:`load_checkpoint` the same way. Nothing is downloaded: loads use ``local_files_only=True``.

``save_policy`` also writes ``ablate_policy.json`` (the policy's name and whether prompts go through
the chat template); checkpoints without it render prompts through the chat template when the
tokenizer has one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from ablate.errors import AblateError
from ablate.models.policy import Policy

#: The file beside the weights that records how the policy renders prompts.
POLICY_FILE = "ablate_policy.json"

#: The attention kernel of every model loaded or built here. Measured on 1 CPU thread (tiny-llama,
#: batch 64 x 64 tokens, medians of 6): "sdpa" and "eager" are within noise of each other (forward
#: plus backward 471 vs 481 ms, one cached decode step 5.8 vs 6.0 ms); sdpa needs no [T, T]
#: attention matrix in memory at longer sequences, so it is the default.
ATTN_IMPLEMENTATION = "sdpa"


def default_cache_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The root of ablate's on-disk caches: ``cache_dir``, else ``$ABLATE_CACHE``, else ``~/.cache/ablate``."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get("ABLATE_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "ablate"


def is_checkpoint_dir(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is a directory with a ``config.json`` (a Hugging Face model checkpoint)."""
    p = Path(path).expanduser()
    return p.is_dir() and (p / "config.json").is_file()


def save_policy(policy: Policy, path: str | os.PathLike[str]) -> Path:
    """Write ``policy`` as a Hugging Face checkpoint (safetensors weights, tokenizer, policy metadata).

    The directory loads back with :func:`load_checkpoint` / ``ablate.models.load_policy`` (the same
    logits, bit for bit) and with plain ``AutoModelForCausalLM.from_pretrained`` /
    ``AutoTokenizer.from_pretrained``.

    Returns:
        The checkpoint directory.
    """
    out = Path(path).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a one-shard tiny model needs no "Writing model shards" bar
    try:
        policy.model.save_pretrained(out, safe_serialization=True)
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()
    policy.tokenizer.save_pretrained(out)
    meta = {"name": policy.name, "use_chat_template": bool(policy.use_chat_template)}
    (out / POLICY_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    return out


def _read_policy_meta(path: Path) -> dict[str, Any]:
    f = path / POLICY_FILE
    if not f.is_file():
        return {}
    try:
        meta = json.loads(f.read_text())
    except (OSError, ValueError) as exc:
        raise AblateError(f"{f}: unreadable policy metadata ({exc}); delete the file or re-save the policy") from None
    return meta if isinstance(meta, dict) else {}


def load_checkpoint(
    path: str | os.PathLike[str],
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
    name: str | None = None,
    use_chat_template: bool | None = None,
) -> Policy:
    """Load a local Hugging Face causal-LM checkpoint directory (model plus tokenizer) as a Policy.

    Args:
        path: a directory holding ``config.json``, the weights and the tokenizer files.
        device: where the model goes ("cpu", "cuda", ...).
        dtype: the parameter dtype; None keeps the checkpoint's dtype (``dtype="auto"``).
        name: the policy's name; default: the name recorded by :func:`save_policy`, else the path.
        use_chat_template: render prompts through the chat template; default: as recorded by
            :func:`save_policy`, else whether the tokenizer has a chat template.

    Returns:
        The policy, its model in eval mode.

    Raises:
        AblateError: the directory is not a checkpoint, cannot be loaded, or its tokenizer has no EOS.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    p = Path(path).expanduser()
    if not is_checkpoint_dir(p):
        raise AblateError(
            f"{p} is not a Hugging Face checkpoint directory (no config.json); give a zoo model name "
            "or a directory written by save_pretrained / ablate.models.save_policy"
        )
    meta = _read_policy_meta(p)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            p,
            local_files_only=True,
            dtype=dtype if dtype is not None else "auto",
            attn_implementation=ATTN_IMPLEMENTATION,
        )
        tokenizer = AutoTokenizer.from_pretrained(p, local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        raise AblateError(f"cannot load the checkpoint in {p}: {exc}") from None
    if tokenizer.eos_token_id is None:
        eos = getattr(model.generation_config, "eos_token_id", None) or model.config.eos_token_id
        if isinstance(eos, list):
            eos = eos[0] if eos else None
        if eos is None:
            raise AblateError(f"the tokenizer in {p} defines no eos_token; set it in tokenizer_config.json")
        tokenizer.eos_token = tokenizer.convert_ids_to_tokens(int(eos))
    if use_chat_template is None:
        use_chat_template = bool(meta.get("use_chat_template", getattr(tokenizer, "chat_template", None)))
    model.to(device)
    model.eval()
    return Policy(
        model=model,
        tokenizer=tokenizer,
        name=name or str(meta.get("name") or p),
        use_chat_template=bool(use_chat_template),
    )

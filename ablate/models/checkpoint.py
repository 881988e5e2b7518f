"""Local Hugging Face checkpoints: save a :class:`Policy`, load any causal-LM checkpoint directory.

A checkpoint directory is what ``save_pretrained`` writes for a model and its tokenizer
(``config.json``, ``model.safetensors``, ``tokenizer.json``, ...), so a checkpoint that
:func:`save_policy` writes loads with plain ``AutoModelForCausalLM`` / ``AutoTokenizer`` too, and
any local checkpoint (a downloaded ``Qwen2.5-0.5B-Instruct``, the SmolLM2 cache) loads through
:func:`load_checkpoint` the same way. Nothing is downloaded: loads use ``local_files_only=True``.

``save_policy`` also writes ``ablate_policy.json`` (the policy's name, whether prompts go through
the chat template, and the ids the tokenizer gave a probe text); checkpoints without it render prompts
through the chat template when the tokenizer has one.

The tokenizer loads as saved (``tokenizer="saved"``, the default): a tokenizer saved with the generic
fast class (``tokenizer.json`` holds its whole pipeline, as for the zoo's character tokenizer) loads
with that class, and a checkpoint written by :func:`save_policy` must encode its probe text to the ids
recorded (else :class:`AblateError`). ``tokenizer="auto"`` loads through transformers' ``AutoTokenizer``
alone, which (transformers 5) maps some model types to their own tokenizer class whatever the saved
class says: a ``qwen2`` checkpoint then gets ``Qwen2Tokenizer``, whose byte-level pre-tokenizer drops
the character vocabulary's spaces and newlines from every prompt (``"Calculate 69 - 1."`` is encoded as
``"Calculate69-1."``). Every trial that loaded tiny-qwen2's cached warm start did that before issue 54
(``model.tokenizer: auto`` reproduces it).
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

#: How a checkpoint's tokenizer is loaded (``model.tokenizer``): as saved, or as ``AutoTokenizer`` picks.
TOKENIZER_LOADS = ("saved", "auto")

#: Tokenizer classes whose whole pipeline is ``tokenizer.json`` (transformers 4 and 5 names).
GENERIC_TOKENIZER_CLASSES = ("PreTrainedTokenizerFast", "TokenizersBackend")

#: The text whose ids :func:`save_policy` records and :func:`load_checkpoint` checks: every printable ASCII
#: character, newlines, and the format tags between words and digits.
TOKENIZER_PROBE = ("".join(chr(c) for c in range(32, 127))
                   + "\nCalculate 69 - 1.\n<think>5+9=14\n1+2=3</think><answer> -17 x</answer>\n")


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
    probe = [int(i) for i in policy.tokenizer.encode(TOKENIZER_PROBE, add_special_tokens=False)]
    meta = {"name": policy.name, "use_chat_template": bool(policy.use_chat_template),
            "tokenizer_probe": {"text": TOKENIZER_PROBE, "ids": probe}}
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


def _saved_tokenizer_class(path: Path) -> str | None:
    """The ``tokenizer_class`` of ``path``'s ``tokenizer_config.json`` (None when there is none)."""
    try:
        value = json.loads((path / "tokenizer_config.json").read_text()).get("tokenizer_class")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def load_tokenizer(path: str | os.PathLike[str], how: str = "saved") -> Any:
    """The tokenizer of checkpoint directory ``path``.

    Args:
        path: the checkpoint directory.
        how: ``saved``: a tokenizer saved with a generic fast class (:data:`GENERIC_TOKENIZER_CLASSES`)
            and a ``tokenizer.json`` loads with that class, exactly the pipeline saved; any other through
            ``AutoTokenizer``. ``auto``: through ``AutoTokenizer`` always, which may swap the pipeline for
            the model type's own (see the module docstring).
    """
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if how not in TOKENIZER_LOADS:
        raise AblateError(f"tokenizer load {how!r}: use one of {', '.join(TOKENIZER_LOADS)}")
    p = Path(path).expanduser()
    if how == "saved" and (p / "tokenizer.json").is_file() and _saved_tokenizer_class(p) in GENERIC_TOKENIZER_CLASSES:
        return PreTrainedTokenizerFast.from_pretrained(p, local_files_only=True)
    return AutoTokenizer.from_pretrained(p, local_files_only=True)


def _check_probe(path: Path, tokenizer: Any, meta: dict[str, Any]) -> None:
    """Raise when the loaded tokenizer encodes the probe text other than the saved one did."""
    probe = meta.get("tokenizer_probe")
    if not isinstance(probe, dict) or not isinstance(probe.get("text"), str):
        return  # saved before the probe was recorded
    got = [int(i) for i in tokenizer.encode(probe["text"], add_special_tokens=False)]
    if got != probe.get("ids"):
        raise AblateError(
            f"the tokenizer loaded from {path} ({type(tokenizer).__name__}) encodes text differently from the "
            f"tokenizer saved there: {len(got)} ids for the probe text where it gave {len(probe.get('ids') or [])}; "
            "a policy loaded with it would see other prompts than it was trained on"
        )


def load_checkpoint(
    path: str | os.PathLike[str],
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
    name: str | None = None,
    use_chat_template: bool | None = None,
    tokenizer: str = "saved",
) -> Policy:
    """Load a local Hugging Face causal-LM checkpoint directory (model plus tokenizer) as a Policy.

    Args:
        path: a directory holding ``config.json``, the weights and the tokenizer files.
        device: where the model goes ("cpu", "cuda", ...).
        dtype: the parameter dtype; None keeps the checkpoint's dtype (``dtype="auto"``).
        name: the policy's name; default: the name recorded by :func:`save_policy`, else the path.
        use_chat_template: render prompts through the chat template; default: as recorded by
            :func:`save_policy`, else whether the tokenizer has a chat template.
        tokenizer: ``saved`` (as saved, its probe text checked) or ``auto`` (``AutoTokenizer``'s choice):
            see :func:`load_tokenizer` and the module docstring.

    Returns:
        The policy, its model in eval mode.

    Raises:
        AblateError: the directory is not a checkpoint, cannot be loaded, or its tokenizer has no EOS
            (or, loaded as saved, encodes the probe text that :func:`save_policy` recorded differently).
    """
    from transformers import AutoModelForCausalLM

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
        tok = load_tokenizer(p, tokenizer)
    except (OSError, ValueError, KeyError) as exc:
        raise AblateError(f"cannot load the checkpoint in {p}: {exc}") from None
    if tokenizer == "saved":
        _check_probe(p, tok, meta)
    if tok.eos_token_id is None:
        eos = getattr(model.generation_config, "eos_token_id", None) or model.config.eos_token_id
        if isinstance(eos, list):
            eos = eos[0] if eos else None
        if eos is None:
            raise AblateError(f"the tokenizer in {p} defines no eos_token; set it in tokenizer_config.json")
        tok.eos_token = tok.convert_ids_to_tokens(int(eos))
    if use_chat_template is None:
        use_chat_template = bool(meta.get("use_chat_template", getattr(tok, "chat_template", None)))
    model.to(device)
    model.eval()
    return Policy(
        model=model,
        tokenizer=tok,
        name=name or str(meta.get("name") or p),
        use_chat_template=bool(use_chat_template),
    )

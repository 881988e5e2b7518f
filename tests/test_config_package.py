"""Tests of the shape of ablate.config: torch-free validation, declared built-in names, one resolve_device,
short functions."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ablate.config import TrialConfig, resolve_device
from ablate.errors import ConfigError
from ablate.registry import BUILTIN_NAMES

ROOT = Path(__file__).resolve().parent.parent

_TORCH_FREE = """
import json, sys
import ablate.config
from ablate.config import TrialConfig, TrialConfigError
TrialConfig()
errors = []
for overrides in (["reward.components=[final_answer, prmm]"], ["algo.advantage=grpoo"],
                  ["rollout.max_new_tokens=100000"]):
    try:
        TrialConfig.from_overrides(overrides)
    except TrialConfigError as exc:
        errors.append(str(exc))
print(json.dumps({"torch": "torch" in sys.modules, "errors": errors}))
"""


def _run(script: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=120, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_validating_a_config_does_not_import_torch():
    out = _run(_TORCH_FREE)
    assert out["torch"] is False
    reward, estimator, positions = out["errors"]
    assert "rollout.max_new_tokens: 100000 tokens do not fit in the 256 positions of model tiny-llama" in positions
    assert "(1 problem)" in reward and "(1 problem)" in estimator
    assert ("reward.components[1]: unknown reward component 'prmm'; valid names: final_answer, prm, kl, format, "
            "partial, missing_eos, soft_overlong (did you mean 'prm'?)") in reward
    assert ("algo.advantage: unknown advantage estimator 'grpoo'; valid names: grpo, dr_grpo, rloo, grpo_process, "
            "gae (did you mean 'grpo'?)") in estimator


def test_a_study_plugin_name_is_found_without_loading_the_builtins():
    out = _run("""
import json, sys
from ablate.registry import builtins_loaded
from ablate.study.plan import Plan
from ablate.study import load_study
study = load_study("studies/examples/new_factor.yaml")
names = sorted({n for s in Plan.of(study).specs for n in s.config.reward.components})
print(json.dumps({"loaded": builtins_loaded(), "names": names}))
""")
    assert out["loaded"] is False and "brevity" in out["names"]


def test_builtin_names_are_declared_as_registered():
    """BUILTIN_NAMES, which validation reads, is exactly what the built-in modules register (in a fresh process)."""
    out = _run("""
import json
from ablate.registry import ALL_REGISTRIES, BUILTIN_NAMES, load_builtin_registries
load_builtin_registries()
print(json.dumps({kind: ALL_REGISTRIES[kind].names() for kind in BUILTIN_NAMES}))
""")
    assert out == {kind: list(names) for kind, names in BUILTIN_NAMES.items()}


def test_one_resolve_device_for_configs_strings_and_torch_devices():
    import torch

    from ablate.models import zoo

    assert zoo.resolve_device is resolve_device
    cpu = torch.device("cpu")
    assert resolve_device("cpu") == resolve_device(cpu) == resolve_device(TrialConfig(device="cpu")) == cpu
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ConfigError, match="device must be auto, cpu, mps, cuda or cuda:N, got 'gpu'"):
        resolve_device("gpu")
    if not torch.cuda.is_available():
        for device in ("cuda", torch.device("cuda:0")):
            with pytest.raises(ConfigError, match="CUDA is not available here; use device=auto or device=cpu"):
                resolve_device(device)


def test_every_function_of_the_config_package_is_under_80_lines():
    long = []
    for path in sorted((ROOT / "ablate" / "config").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1
                if n >= 80:
                    long.append(f"{path.name}:{node.lineno} {node.name} ({n} lines)")
    assert not long

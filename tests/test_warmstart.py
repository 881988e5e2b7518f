"""The SFT warm start: reaches its band, is cached, concurrent builders build it once, and
warmstart.seed shares one warm start between trial seeds or trains one per trial seed."""

from __future__ import annotations

import json
import multiprocessing as mp
from pathlib import Path

import pytest
import torch

from ablate.cli import main
from ablate.config import TrialConfig
from ablate.errors import ConfigError
from ablate.train import build_policy
from ablate.train.warmstart import WarmStartSpec, warm_start

#: The same spec as the trainer tests' warm start (tests/test_train.py), so the session builds it once.
SPEC = dict(model="micro-llama", difficulty=1, target_min=0.15, target_max=0.6, batch_size=32, lr=3e-3,
            max_new_tokens=16)


@pytest.fixture(scope="module")
def built(ws_cache):
    """The session's warm start (built here or by an earlier test): (cache dir, policy, report)."""
    policy, report = warm_start(WarmStartSpec(**SPEC), cache_dir=ws_cache)
    return ws_cache, policy, report


def test_reaches_band_and_reuses_cache(built):
    tmp_path, policy, report = built
    spec = WarmStartSpec(**SPEC)
    assert report.reached_target and spec.target_min <= report.eval_accuracy <= spec.target_max
    assert report.steps < spec.max_steps and report.steps % spec.eval_every == 0
    assert report.format_rate > 0.5
    entry = Path(tmp_path) / "warmstart" / spec.key()
    assert (entry / "report.json").exists() and (entry / "policy").is_dir()
    assert not list((Path(tmp_path) / "warmstart").glob(".*tmp*")), "no temporary folder may remain"

    again, cached = warm_start(spec, cache_dir=tmp_path)
    assert cached.cached and cached.eval_accuracy == report.eval_accuracy
    for a, b in zip(policy.model.parameters(), again.model.parameters()):
        assert (a == b).all()


def test_key_depends_on_every_setting():
    base = WarmStartSpec(**SPEC)
    assert base.key() == WarmStartSpec(**SPEC).key()
    for change in ({"seed": 1}, {"lr": 1e-3}, {"difficulty": 2}, {"model": "tiny-llama"},
                   {"task_options": {"max_operand": 5}}):
        assert WarmStartSpec(**{**SPEC, **change}).key() != base.key(), change


def test_bad_spec_is_one_clear_error():
    with pytest.raises(ConfigError, match="target_min < target_max"):
        WarmStartSpec(target_min=0.7, target_max=0.6)
    with pytest.raises(ConfigError, match="batch_size must be >= 1"):
        WarmStartSpec(batch_size=0)


def _build(cache_dir: str, queue) -> None:
    import torch

    torch.set_num_threads(1)
    _, report = warm_start(WarmStartSpec(**{**SPEC, "seed": 7}), cache_dir=cache_dir)
    queue.put((report.cached, report.eval_accuracy))


def test_concurrent_processes_build_once(tmp_path):
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_build, args=(str(tmp_path), queue)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=600)
        assert p.exitcode == 0
    results = [queue.get(timeout=5) for _ in procs]
    assert sorted(c for c, _ in results) == [False, True], "exactly one process builds, the other reuses"
    assert results[0][1] == results[1][1]


def test_cli_warmstart_json(built, capsys):
    cache, _, report = built
    args = ["warmstart", "--json", "--model", "micro-llama", "--difficulty", "1", "--target-min", "0.15",
            "--target-max", "0.6", "--lr", "3e-3", "--max-new-tokens", "16",
            "--cache-dir", str(cache)]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["cached"] and out["key"] == report.key and out["eval_accuracy"] == report.eval_accuracy
    assert {"step_accuracy", "format_rate", "steps", "path"} <= out.keys()


def test_cli_warmstart_unknown_model(capsys):
    assert main(["warmstart", "--model", "tiny-lama"]) == 2
    assert "did you mean 'tiny-llama'" in capsys.readouterr().err


@pytest.mark.usefixtures("one_thread")
def test_warmstart_seed_shared_or_per_trial_seed(tmp_path):
    """warmstart.seed=0 (shared): trial seeds 0 and 1 start from the same weights; null (per trial): each
    trial seed from its own warm start, trained with that seed. A 3-step warm start keeps it to seconds."""
    tiny = ["model.name=micro-llama", "task.difficulty=1", "device=cpu", "warmstart.max_steps=3",
            "warmstart.batch_size=8", "rollout.max_new_tokens=4", f"warmstart.cache_dir={tmp_path}"]

    def start(seed: int, ws_seed: str) -> tuple[list[torch.Tensor], str]:
        config = TrialConfig.from_overrides([*tiny, f"seed={seed}", f"warmstart.seed={ws_seed}"])
        policy, report = build_policy(config, torch.device("cpu"))
        return [p.detach().clone() for p in policy.model.parameters()], report["key"]

    def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
        return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))

    shared0, shared1 = start(0, "0"), start(1, "0")
    assert shared0[1] == shared1[1] and same(shared0[0], shared1[0])
    trial0, trial1 = start(0, "null"), start(1, "null")
    assert trial0[1] != trial1[1] and not same(trial0[0], trial1[0])
    assert trial0[1] == shared0[1]  # trial seed 0 trains with seed 0: the shared warm start of seed 0
    assert len(list((tmp_path / "warmstart").glob("*/report.json"))) == 2


@pytest.mark.usefixtures("one_thread")
def test_a_warm_start_cached_in_float64_loads_in_the_configured_float32(tmp_path):
    """A warm start built while torch's default dtype was float64 is trained and cached in float64; a trial
    with model.dtype=float32 (auto on a CPU is the same) must still get float32 weights, else its
    bfloat16 rollout's mismatch against a float64 trainer is not the one a precision study measures. It
    loaded as float64 before (load_policy kept the checkpoint's dtype). The cache entry is not renamed."""
    from safetensors.torch import load_file

    tiny = ["model.name=micro-llama", "task.difficulty=1", "device=cpu", "warmstart.max_steps=3",
            "warmstart.batch_size=8", "rollout.max_new_tokens=4", f"warmstart.cache_dir={tmp_path}"]
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        fresh, built = build_policy(TrialConfig.from_overrides(tiny), torch.device("cpu"))
    finally:
        torch.set_default_dtype(default)
    (weights,) = (Path(built["path"]) / "policy").glob("*.safetensors")
    assert {t.dtype for t in load_file(weights).values()} == {torch.float64}  # the cache holds float64
    assert {p.dtype for p in fresh.model.parameters()} == {torch.float32}
    for mode in ("float32", "auto"):
        policy, report = build_policy(TrialConfig.from_overrides([*tiny, f"model.dtype={mode}"]), torch.device("cpu"))
        assert report["cached"] and report["key"] == built["key"]
        assert {p.dtype for p in policy.model.parameters()} == {torch.float32}, mode
        for a, b in zip(policy.model.parameters(), fresh.model.parameters(), strict=True):
            assert torch.equal(a, b)

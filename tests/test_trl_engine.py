"""engine.name: trl — TRL's GRPOTrainer behind the engine seam.

- the map is right: for each mapped option set, TRL's own loss code (``GRPOTrainer._compute_loss`` of the
  trainer the engine builds) and ablate's (``rl.losses`` with the trial's options) give the same loss and
  gradient on the same batch, on-policy and with moved old log-probs (clipping active);
- options TRL cannot honour are refused at validation, exit 2, one message, nothing written;
- a study with the trl engine runs through the same store, MLflow run and report path, and a trial killed
  mid-run resumes from TRL's checkpoint with each (metric, step) logged once.
"""

from __future__ import annotations

import math
import os
import signal

import pytest
import servers
import torch
from tolerance import MODEL, assert_close, is_close

from ablate.config import TrialConfig
from ablate.engines.trl_map import AGGREGATION_LOSS_TYPES, grpo_arguments, trl_bf16, trl_refusals
from ablate.rl import kl_penalty
from ablate.rl.losses import aggregate_loss, policy_loss_from_config

trl = pytest.importorskip("trl")

#: A micro trial: random-init tiny-llama (no warm start), 2 prompts x 4 completions of at most 8 tokens.
MICRO = {"warmstart.enabled": False, "task.difficulty": 2, "rollout.prompts_per_step": 2, "rollout.group_size": 4,
         "rollout.max_new_tokens": 8, "algo.minibatches": 1, "eval.n_problems": 4, "task.train_size": 64,
         "engine.name": "trl", "threads": 1, "device": "cpu"}


def micro_config(**overrides: object) -> TrialConfig:
    return TrialConfig.from_overrides({**MICRO, **overrides})


def micro_batch(state, seed: int = 0) -> dict[str, torch.Tensor]:
    """2 prompts of one length x 4 completions: random tokens, some ended by EOS early, right-padded."""
    g = torch.Generator().manual_seed(seed)
    by_len: dict[int, list[list[int]]] = {}
    for p in state.train_pool:
        by_len.setdefault(len(state.policy.encode_prompt(p.prompt)), []).append(state.policy.encode_prompt(p.prompt))
    prompts = next(v[:2] for v in by_len.values() if len(v) >= 2)  # equal lengths: TRL passes no position ids
    prompt_ids = torch.tensor([p for p in prompts for _ in range(4)])  # (8, P)
    t, eos, pad = 8, state.policy.eos_token_id, state.policy.pad_token_id
    completion = torch.randint(4, 100, (8, t), generator=g)  # (8, T) ordinary characters
    lengths = torch.tensor([8, 3, 5, 8, 1, 6, 8, 4])
    mask = (torch.arange(t)[None, :] < lengths[:, None]).long()  # (8, T)
    ended = lengths < t
    completion[ended, lengths[ended] - 1] = eos
    completion = torch.where(mask.bool(), completion, torch.full_like(completion, pad))
    return {"prompt_ids": prompt_ids, "prompt_mask": torch.ones_like(prompt_ids), "completion_ids": completion,
            "completion_mask": mask, "advantages": torch.randn(8, generator=g)}


def ablate_loss(c: TrialConfig, model, batch, old_logp, ref_logp) -> torch.Tensor:
    """ablate's loss of the batch with the trial's options (as ``train.update.micro_batch_loss`` builds it)."""
    from ablate.models.logprobs import token_logprobs_and_entropy

    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attn = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    mask = batch["completion_mask"].float()
    logp, _ = token_logprobs_and_entropy(model, ids, attn, num_prompt_tokens=batch["prompt_ids"].shape[1],
                                         temperature=c.rollout.temperature)
    old = logp.detach() if old_logp is None else old_logp
    adv = batch["advantages"][:, None].expand_as(mask) * mask  # (B, T): a sequence's advantage on its tokens
    per_token, _ = policy_loss_from_config(logp, old, adv, mask, c.loss)
    loss = aggregate_loss(per_token, mask, c.loss.aggregation, max_len=c.loss_max_len)
    if c.kl.placement == "loss":
        kl = kl_penalty(logp, ref_logp, estimator=c.kl_estimator, mask=mask)
        loss = loss + c.kl.beta * aggregate_loss(kl, mask, c.loss.aggregation, max_len=c.loss_max_len)
    return loss


def trl_loss(trainer, batch, old_logp, ref_logp) -> torch.Tensor:
    """TRL's loss of the same batch: ``GRPOTrainer._compute_loss`` of the trainer the engine built."""
    inputs = dict(batch)
    if old_logp is not None:
        inputs["old_per_token_logps"] = old_logp
    if ref_logp is not None:
        inputs["ref_per_token_logps"] = ref_logp
    inputs["num_items_in_batch"] = batch["completion_mask"].sum()
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    return trainer._compute_loss(trainer.model, inputs)


def both_losses(c: TrialConfig, tmp_path, *, moved: bool, seed: int = 0):
    """(ablate's loss, its gradient, TRL's loss, its gradient) on one batch for trial ``c``."""
    from ablate.engines.trl import build_trainer, make_scorer
    from ablate.models.logprobs import token_logprobs
    from ablate.train.setup import setup_trial

    state = setup_trial(c)
    trainer = build_trainer(state, make_scorer(state), tmp_path / "trl", save=False)
    model = trainer.model
    batch = micro_batch(state, seed)
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attn = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    with torch.no_grad():
        logp0 = token_logprobs(model, ids, attn, num_prompt_tokens=batch["prompt_ids"].shape[1])
    g = torch.Generator().manual_seed(seed + 1)
    mask = batch["completion_mask"].float()
    old = (logp0 + 0.3 * torch.randn(logp0.shape, generator=g)) * mask if moved else None  # ratios far from 1
    ref = (logp0 + 0.2 * torch.randn(logp0.shape, generator=g)) * mask if c.kl.placement == "loss" else None
    params = [p for p in model.parameters() if p.requires_grad]
    ours = ablate_loss(c, model, batch, old, ref)
    our_grad = torch.autograd.grad(ours, params)
    theirs = trl_loss(trainer, batch, old, ref)
    their_grad = torch.autograd.grad(theirs, params)
    return ours, our_grad, theirs, their_grad


OPTION_SETS = [
    {"loss.aggregation": agg, "loss.ratio_level": level}
    for agg in AGGREGATION_LOSS_TYPES for level in ("token", "sequence")
] + [
    {"loss.aggregation": "seq-mean-token-mean", "kl.placement": "loss", "kl.beta": 0.1},
    {"loss.aggregation": "token-mean", "kl.placement": "loss", "kl.beta": 0.1, "loss.clip_high": 0.28},
    {"loss.aggregation": "seq-mean-token-sum-norm", "algo.advantage": "dr_grpo", "algo.adv_std": "group"},
    {"loss.aggregation": "token-mean", "loss.ratio_level": "sequence", "loss.clip_low": 3e-4, "loss.clip_high": 4e-4},
]


@pytest.mark.parametrize("options", OPTION_SETS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
@pytest.mark.parametrize("moved", [False, True], ids=["on-policy", "moved-old-logp"])
def test_trl_loss_and_gradient_equal_ablate_s_for_each_mapped_option_set(options, moved, tmp_path):
    c = micro_config(**options)
    ours, our_grad, theirs, their_grad = both_losses(c, tmp_path, moved=moved)
    assert torch.isfinite(ours) and float(ours) != 0.0
    assert_close(theirs, ours, MODEL)  # two forward passes of the model, each summed its own way
    for a, b in zip(our_grad, their_grad, strict=True):
        assert_close(b, a, MODEL)  # a backward pass through the model, TRL's arrangement against ablate's
    assert max(float(g.abs().max()) for g in our_grad) > 0


def test_the_comparison_can_fail_a_wrong_map_is_caught(tmp_path):
    """The same comparison with TRL told another loss type (dapo's normalizer is not seq-mean-token-mean's)."""
    c = micro_config(**{"loss.aggregation": "seq-mean-token-mean"})
    from ablate.engines.trl import build_trainer, make_scorer
    from ablate.train.setup import setup_trial

    state = setup_trial(c)
    trainer = build_trainer(state, make_scorer(state), tmp_path / "trl", save=False)
    trainer.loss_type = "luspo"  # a sum over each sequence's tokens, not their mean
    batch = micro_batch(state)
    ours = ablate_loss(c, trainer.model, batch, None, None)
    theirs = trl_loss(trainer, batch, None, None)
    assert not is_close(ours, theirs, MODEL)


def test_grpo_arguments_of_a_trial_by_hand():
    c = micro_config(**{"loss.aggregation": "seq-mean-token-sum-norm", "loss.ratio_level": "sequence",
                        "loss.clip_low": 3e-4, "loss.clip_high": 4e-4, "kl.placement": "loss", "kl.beta": 0.05,
                        "algo.ppo_epochs": 2, "algo.minibatches": 2, "train.steps": 5, "train.checkpoint_every": 2,
                        "reward.components": ["final_answer", "format"], "reward.format.weight": 0.1,
                        "algo.adv_std": "batch", "optim.lr": 3e-5})
    a = grpo_arguments(c)
    assert a["loss_type"] == "dr_grpo" and a["importance_sampling_level"] == "sequence"
    assert (a["epsilon"], a["epsilon_high"], a["beta"]) == (3e-4, 4e-4, 0.05)
    assert a["use_bias_correction_kl"] is False and a["scale_rewards"] == "batch"
    assert (a["num_iterations"], a["steps_per_generation"], a["per_device_train_batch_size"]) == (2, 2, 4)
    assert (a["max_steps"], a["save_steps"]) == (20, 8)  # 5 RL steps x 2 epochs x 2 minibatches; 2 x 4
    assert a["reward_weights"] == [1.0, 0.1] and a["learning_rate"] == 3e-5
    assert a["num_generations"] == 4 and a["max_completion_length"] == 8


@pytest.mark.parametrize(("override", "path"), [
    ({"reward.components": ["final_answer", "prm"]}, "reward.components"),
    ({"kl.placement": "reward", "reward.components": ["final_answer", "kl"]}, "kl.placement"),
    ({"algo.advantage": "gae", "critic.enabled": True}, "algo.advantage"),
    ({"loss.aggregation": "prompt-mean"}, "loss.aggregation"),
    ({"algo.dynamic_sampling": True}, "algo.dynamic_sampling"),
    ({"loss.dual_clip": 3.0}, "loss.dual_clip"),
    ({"loss.ratio_level": "sequence_token"}, "loss.ratio_level"),
    ({"train.packed": True}, "train.packed"),
])
def test_options_trl_cannot_honour_are_refused_by_name(override, path):
    from ablate.config import TrialConfigError

    TrialConfig.from_overrides({**MICRO, "engine.name": "ablate", **override})  # fine on ablate's own trainer
    with pytest.raises(TrialConfigError) as err:
        micro_config(**override)
    problems = err.value.problems
    assert [p.path for p in problems].count(path) == 1, problems
    msg = next(p.message for p in problems if p.path == path)
    assert "engine.name=trl" in msg and "engine.name=ablate supports it" in msg


def test_the_default_trial_on_trl_is_accepted_and_its_key_names_the_engine():
    assert trl_refusals(micro_config()) == []
    assert micro_config().trial_key() != micro_config(**{"engine.name": "ablate"}).trial_key()
    assert TrialConfig().trial_key() == TrialConfig.from_overrides({"engine.name": "ablate"}).trial_key()


# ------------------------------------------------------------------------------ a study on the trl engine


def write_trl_study(folder, name: str, processes: int = 1) -> object:
    import yaml

    base = {"engine.processes": processes, **{k: v for k, v in MICRO.items() if k not in ("threads", "device")}, "model.name": "micro-llama",
            "task.difficulty": 1, "rollout.max_new_tokens": 16, "algo.minibatches": 2, "train.steps": 4,
            "train.checkpoint_every": 2, "eval.every": 3, "task.train_size": 200}
    study = {"name": name, "base": base, "seeds": 1, "objective": {"metric": "eval/accuracy", "mode": "max"},
             "factors": {"ratio": {"levels": {"token": {"loss.ratio_level": "token"}}}}}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    return path


@pytest.mark.slow
@pytest.mark.parametrize(("processes", "group"), [(1, True), (2, False), (2, True)],
                         ids=["one-process", "two-processes", "two-processes-group-kill"])
def test_a_trl_study_logs_each_step_once_and_resumes_after_sigkill_from_trl_s_checkpoint(workdir, capsys, processes,
                                                                                           group):
    """The same store, MLflow run, evaluation and report path as ablate's trainer; killed after its RL step 2
    checkpoint, the same command resumes from it (TRL's resume_from_checkpoint) and every (metric, step) is
    in the trial's one MLflow run once. With 2 processes the trial runs under torchrun (gloo on CPU), the
    worker logging what rank 0 writes."""
    import subprocess
    import sys

    from mlflow import MlflowClient
    from test_runner import attempts_by_key, kill_once_written, mlflow_runs, sub_env

    from ablate.cli import main
    from ablate.paths import STORE_FILE
    from ablate.study import load_study
    from ablate.study.plan import Plan

    study_file = write_trl_study(workdir, "trlkill", processes)
    (key,) = [s.key for s in Plan.of(load_study(study_file), "default").specs]
    trial = workdir / "runs" / "trlkill" / "trials" / key
    log = open(workdir / "first.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "ablate", "run", str(study_file), "--no-progress", "--threads", "1"],
                            cwd=workdir, env=sub_env(workdir), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    checkpoint = trial / "trl" / "checkpoint-4" / "ablate_history.json"
    if processes > 1 and not group:  # issue 55: SIGKILL of the worker alone; torchrun and its ranks die with it
        _no_rank_survives(trial, _kill_the_worker_once_written(proc, checkpoint, workdir / "first.log", workdir),
                          workdir)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    else:  # SIGKILL of the whole group (what a resume test does); with 2 processes no rank may outlive it
        kill_once_written(proc, [checkpoint], workdir / "first.log")
        if processes > 1:
            _no_rank_survives(trial, sorted(p.name for p in (trial / "trl").iterdir()), workdir)
    log.close()
    storage = str(workdir / "runs" / "trlkill" / STORE_FILE)
    assert [a.state for a in attempts_by_key(storage, "trlkill")[key]] == ["running"]

    assert main(["run", str(study_file), "--no-progress", "--threads", "1"]) == 0
    if processes > 1 and not group:  # the killed worker's launch folder is gone: the rerun's trl trial swept it
        assert _KILLED_FOLDERS and not any(f.exists() for f in _KILLED_FOLDERS)
    err = capsys.readouterr().err
    assert "1 of them left by dead workers: they resume from their checkpoints" in err
    stale, resumed = attempts_by_key(storage, "trlkill")[key]
    assert stale.state == "failed" and resumed.state == "done" and resumed.result["resumed_from"] >= 2
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    _, (child,) = mlflow_runs(uri, "trlkill")
    assert child.info.status == "FINISHED" and child.data.params["engine.name"] == "trl"
    assert child.data.params["engine.processes"] == str(processes)
    c = MlflowClient(uri)
    for metric, steps in (("reward/total", list(range(1, 5))), ("trl/loss", list(range(1, 5))),
                          ("compute/tokens", list(range(5))), ("eval/accuracy", [0, 3, 4])):
        logged = sorted(m.step for m in c.get_metric_history(child.info.run_id, metric))
        assert logged == steps, (metric, logged)  # each step once, none missing across the kill
    tokens = [m.value for m in sorted(c.get_metric_history(child.info.run_id, "compute/tokens"), key=lambda m: m.step)]
    assert all(b > a for a, b in zip(tokens, tokens[1:]))  # cumulative across the resume
    assert float(child.data.tags["ablate.objective"]) == resumed.value == child.data.metrics["eval/accuracy"]
    from ablate.metrics import known_metric

    assert all(known_metric(k) for k in child.data.metrics), sorted(child.data.metrics)  # the glossary has them
    assert not trial.exists() or not (trial / "trl").exists()  # finished: TRL's checkpoints dropped
    assert (workdir / "reports" / "trlkill" / "index.html").exists()
    # the resumed trial computed what the same trial computes unkilled, value by value (issue 55)
    ref = _unkilled_histories(workdir, study_file)
    got = _histories(c, child.info.run_id)
    assert sorted(got) == sorted(ref) and len(got) > 20, sorted(set(got) ^ set(ref))
    differ = [m for m in got if not _same_history(got[m], ref[m])]
    assert not differ, {m: (got[m], ref[m]) for m in differ}


#: Metrics that depend on the clock or the process, not on what the trial computes.
_TIMING = ("compute/seconds", "perf/", "time/", "trl/step_time", "system/")


def _histories(client, run_id: str) -> dict[str, list[tuple[int, float]]]:
    """Every metric of an MLflow run but the timings: name -> [(step, value)] by step."""
    run = client.get_run(run_id)
    return {k: sorted((m.step, m.value) for m in client.get_metric_history(run_id, k))
            for k in run.data.metrics if not k.startswith(_TIMING)}


def _same_history(a: list[tuple[int, float]], b: list[tuple[int, float]]) -> bool:
    """The same steps and bit-identical values (NaN equal to NaN: a metric with no sample at a step)."""
    return len(a) == len(b) and all(sa == sb and (va == vb or (math.isnan(va) and math.isnan(vb)))
                                    for (sa, va), (sb, vb) in zip(a, b))


def _unkilled_histories(workdir, study_file) -> dict[str, list[tuple[int, float]]]:
    """The same study run once more, unkilled, in its own folder and MLflow store: its trial's histories."""
    import shutil
    import subprocess
    import sys

    from mlflow import MlflowClient
    from test_runner import mlflow_runs, sub_env

    ref = workdir / "unkilled"
    ref.mkdir()
    shutil.copy(study_file, ref / study_file.name)
    servers.fresh_mlflow_db(ref)
    env = {**sub_env(workdir), "ABLATE_CACHE": str(workdir / "cache")}  # the same warm start
    subprocess.run([sys.executable, "-m", "ablate", "run", study_file.name, "--no-progress", "--threads", "1"],
                   cwd=ref, env=env, check=True, capture_output=True)
    uri = f"sqlite:///{ref / 'mlflow.db'}"
    _, (child,) = mlflow_runs(uri, "trlkill")
    return _histories(MlflowClient(uri), child.info.run_id)


def _rank_pids(workdir) -> set[int]:
    """Processes running torchrun or a trl rank (their command lines name ablate.engines.trl_rank) of the study
    run in ``workdir``: they inherit its worker's ``ABLATE_CACHE`` (``sub_env``), so a trl trial another test
    runs at the same time (pytest-xdist) is not counted."""
    import os

    mark = f"ABLATE_CACHE={workdir / 'cache'}".encode() + b"\0"
    out = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"ablate.engines.trl_rank" not in f.read():
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                if mark in f.read() + b"\0":
                    out.add(int(pid))
        except OSError:
            continue
    return out


def _kill_the_worker_once_written(proc, checkpoint, log, workdir) -> list[str]:
    """SIGKILL the process that started torchrun (the trial's worker), and it alone, once ``checkpoint`` exists;
    returns the trial's TRL checkpoints at that moment."""
    import time

    deadline = time.monotonic() + 180
    while not checkpoint.exists():
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, "never written"
        time.sleep(0.02)
    ranks = _rank_pids(workdir)
    assert len(ranks) >= 3, ranks  # torchrun and its 2 ranks run
    parents = {int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1]) for pid in ranks}
    (worker,) = parents - ranks  # torchrun's parent: the worker (the ranks' parent is torchrun)
    global _KILLED_FOLDERS
    _KILLED_FOLDERS = _launch_folders(worker)
    assert _KILLED_FOLDERS, "the worker made no launch folder"
    os.kill(worker, signal.SIGKILL)
    return sorted(p.name for p in checkpoint.parent.parent.iterdir())


_KILLED_FOLDERS: list = []


def _launch_folders(owner: int) -> list:
    """The ablate-trl-ranks-* folders in the temporary directory made by process ``owner``."""
    import tempfile
    from pathlib import Path

    from ablate.engines.trl_ranks import OWNER_FILE, PREFIX

    return [f for f in Path(tempfile.gettempdir()).glob(PREFIX + "*")
            if (f / OWNER_FILE).is_file() and (f / OWNER_FILE).read_text().split(" ")[0] == str(owner)]


def _no_rank_survives(trial, at_kill, workdir) -> None:
    """Within 2 s of the worker's SIGKILL no torchrun or rank process runs (before issue 55 they trained on, and
    wrote checkpoint-8 into the trial's folder), and no checkpoint appeared since the kill."""
    import time

    deadline = time.monotonic() + 2
    while _rank_pids(workdir) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _rank_pids(workdir), "ranks outlived their worker"
    time.sleep(1)
    assert sorted(p.name for p in (trial / "trl").iterdir()) == at_kill  # nobody wrote into the trial's folder


def test_a_launch_folder_whose_worker_died_is_swept_and_a_live_one_is_kept(tmp_path):
    """Issue 55: a killed worker leaves its ablate-trl-ranks-* folder; the next trl trial on the machine removes
    the folders whose owner pid is gone, and keeps those of running workers and unknown ones."""
    import os
    import subprocess
    import sys

    from ablate.engines.trl_ranks import OWNER_FILE, PREFIX, sweep_stale_folders

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    folders = {}
    for name, owner in (("dead", str(dead.pid)), ("live", str(os.getpid())), ("unknown", None)):
        folders[name] = tmp_path / f"{PREFIX}{name}"
        folders[name].mkdir()
        if owner:
            (folders[name] / OWNER_FILE).write_text(owner)
    assert sweep_stale_folders(tmp_path) == [folders["dead"]]
    assert not folders["dead"].exists() and folders["live"].exists() and folders["unknown"].exists()


def test_the_launcher_dies_with_its_parent():
    """A process started through the launcher (what starts torchrun) gets SIGKILL when its parent dies."""
    import signal
    import subprocess
    import sys
    import time

    code = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-m', 'ablate.engines.trl_ranks', "
            "str(__import__('os').getpid()), sys.executable, '-c', 'import time; time.sleep(60)']); "
            "print(p.pid, flush=True); time.sleep(60)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    time.sleep(1.0)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{child}/stat") as f:
                if f.read().split()[2] == "Z":
                    break  # a zombie: dead, waiting for its reaper
        except FileNotFoundError:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the launched process outlived its parent")


def test_ablate_validate_and_run_refuse_an_unmappable_option_in_one_message_and_write_nothing(workdir, capsys):
    import yaml

    from ablate.cli import main

    path = write_trl_study(workdir, "trlbad")
    doc = yaml.safe_load(path.read_text())
    doc["factors"]["ratio"]["levels"]["prm"] = {"reward.components": ["final_answer", "prm"]}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    before = sorted(p.name for p in workdir.iterdir())
    for command in (["validate", str(path)], ["run", str(path), "--no-progress"]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert "reward.components: engine.name=trl: TRL's GRPOTrainer cannot honour the reward components prm" in err
        assert "Traceback" not in err
    assert sorted(p.name for p in workdir.iterdir()) == before  # no runs/, no reports/


def test_a_trl_study_without_trl_installed_is_refused_before_anything_is_written(workdir, capsys, monkeypatch):
    """TRL missing (its import fails): ``ablate run`` says how to install it, exit 2, no store, run or report."""
    import sys

    from mlflow import MlflowClient

    from ablate.cli import main

    path = write_trl_study(workdir, "trlmissing")
    monkeypatch.setitem(sys.modules, "trl", None)  # Python's import system: `import trl` raises ImportError
    assert main(["run", str(path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "arm(s) train with engine.name=trl (ratio=token), which needs TRL: pip install 'ablate[trl]'" in err
    assert len(err.strip().splitlines()) == 1
    assert not (workdir / "runs").exists() and not (workdir / "reports").exists()
    assert MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}").get_experiment_by_name("trlmissing") is None


def test_a_trl_trial_is_a_function_of_its_configuration(tmp_path):
    """The same trial key gives the same run: every logged value equal on a second run (one machine), and
    eval/accuracy is ablate's evaluation of the policy TRL trained (the eval rows agree with the metric)."""
    from ablate.engines.base import EngineJob, engine_for

    c = micro_config(**{"model.name": "micro-llama", "task.difficulty": 1, "train.steps": 3, "eval.every": 2})
    runs = []
    for _ in range(2):
        logged: list[tuple[int, dict[str, float]]] = []
        result = engine_for(c).train(EngineJob(c, lambda m, s, out=logged: out.append((s, dict(m)))))
        runs.append((result, logged))
    (a, logged_a), (b, logged_b) = runs

    def strip(history):  # wall-clock metrics aside; NaN (no correct completion) compared as None
        return [(s, {k: (None if v != v else v) for k, v in m.items() if not k.startswith("perf/")})
                for s, m in history]

    assert strip(logged_a) == strip(logged_b) == strip(a.history)
    assert [s for s, _ in logged_a] == [0, 1, 2, 3]
    assert {k for _, m in logged_a[1:] for k in m} >= {"reward/total", "trl/loss", "compute/tokens", "trl/reward"}
    for step in (0, 2, 3):
        rows = [r for r in a.eval_problems if r["step"] == step]
        acc = dict(logged_a)[step]["eval/accuracy"]
        assert len(rows) == c.eval.n_problems and acc == sum(r["correct"] for r in rows) / len(rows)
    assert a.samples and {"prompt", "completion", "correct", "reward/final_answer"} <= set(a.samples[0])
    assert a.final["trl/reward"] == dict(logged_a)[3]["reward/total"]  # TRL's reward mean is ablate's (weight 1)


def test_model_dtype_maps_to_trl_s_bf16_where_ablate_autocasts():
    from ablate.config.device import autocast_dtype

    for dtype in ("auto", "float32", "bfloat16"):
        for device in ("cpu", "cuda"):
            c = micro_config(**{"model.dtype": dtype})
            assert trl_bf16(c, device) == (autocast_dtype(c, torch.device(device)) == torch.bfloat16), (dtype, device)
    assert trl_refusals(micro_config(**{"model.dtype": "bfloat16"})) == []


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_trl_trial_computes_in_the_precision_model_dtype_names(dtype):
    """The policy's linear layers, in TRL's generation (no grad) and in its loss (grad), compute in bfloat16
    under model.dtype=bfloat16 and in float32 under float32 (a global forward hook on every nn.Linear)."""
    from torch.nn.modules.module import register_module_forward_hook

    from ablate.engines.base import EngineJob, engine_for

    c = micro_config(**{"model.name": "micro-llama", "task.difficulty": 1, "train.steps": 1, "eval.every": 0,
                        "model.dtype": dtype})
    seen: set[tuple[bool, torch.dtype]] = set()

    def hook(module, args, output):
        if isinstance(module, torch.nn.Linear) and torch.is_tensor(output):
            seen.add((torch.is_grad_enabled(), output.dtype))

    handle = register_module_forward_hook(hook)
    try:
        engine_for(c).train(EngineJob(c, lambda m, s: None))
    finally:
        handle.remove()
    want = torch.bfloat16 if dtype == "bfloat16" else torch.float32
    assert (False, want) in seen and (True, want) in seen, seen  # sampled and trained in that precision
    if dtype == "float32":
        assert {d for _, d in seen} == {torch.float32}


@pytest.mark.parametrize(("override", "needle"), [
    ({"engine.name": "ablate", "engine.processes": 2}, "engine.processes > 1 needs engine.name=trl"),
    ({"engine.processes": 3}, "minibatches of 8 completions split over 3 processes"),
    ({"engine.processes": 2, "loss.aggregation": "token-mean", "algo.minibatches": 2},
     "token-mean over several processes with algo.minibatches > 1"),
])
def test_a_process_count_the_trial_cannot_use_is_refused_at_engine_processes(override, needle):
    from ablate.config import TrialConfigError

    with pytest.raises(TrialConfigError) as err:
        micro_config(**override)
    (problem,) = [p for p in err.value.problems if p.path == "engine.processes"]
    assert needle in problem.message


def test_two_processes_split_each_minibatch_and_token_mean_becomes_dapo():
    c = micro_config(**{"engine.processes": 2, "loss.aggregation": "token-mean"})
    a = grpo_arguments(c)
    assert (a["per_device_train_batch_size"], a["loss_type"]) == (4, "dapo")  # 8 completions over 2 ranks
    assert grpo_arguments(micro_config(**{"loss.aggregation": "token-mean"}))["loss_type"] == "bnpo"
    assert c.trial_key() != micro_config(**{"loss.aggregation": "token-mean"}).trial_key()


def test_validate_warns_when_engine_processes_exceed_the_machine_s_cores(workdir):
    """Issue 55: engine.processes 1000 passed validate on a 2-core machine; it now gets one warning line (not an
    error: the study may run elsewhere)."""
    from ablate.commands.validate import processes_over_cores
    from ablate.study import load_study

    study = load_study(write_trl_study(workdir, "trlmany", processes=4))
    assert processes_over_cores(study, cores=8) is None
    line = processes_over_cores(study, cores=2)
    assert line.startswith("engine.processes reaches 4 but this machine has 2 CPU cores")


@pytest.mark.parametrize("positions", ["mask", "trl"])
def test_trl_trains_left_padded_prompts_at_the_positions_they_were_sampled_at(positions, tmp_path):
    """Issue 55: countdown's prompts differ in length, so TRL left-pads them; tiny-gpt2 has learned absolute
    positions. With engine.positions mask TRL's loss forward gives the log-probs ablate's sampler computes (the
    positions counted over the mask) to rounding; TRL's own forward (positions: trl, the old behaviour) trains
    a padded row k positions later and is far off."""
    from ablate.engines.trl import build_trainer, make_scorer
    from ablate.models.logprobs import token_logprobs
    from ablate.train.setup import setup_trial

    c = micro_config(**{"model.name": "tiny-gpt2", "task.name": "countdown", "task.difficulty": 2,
                        "engine.positions": positions})
    state = setup_trial(c)
    trainer = build_trainer(state, make_scorer(state), tmp_path / "trl", save=False)
    encoded = sorted({tuple(state.policy.encode_prompt(p.prompt)) for p in state.train_pool}, key=len)
    short, long = encoded[0], encoded[-1]
    assert len(long) > len(short)  # the rows differ in length: one is left-padded
    width, pad = len(long), state.policy.pad_token_id
    prompt_ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in (short, long)])
    prompt_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in (short, long)])
    completion = torch.randint(4, 60, (2, 6), generator=torch.Generator().manual_seed(0))
    ids = torch.cat([prompt_ids, completion], dim=1)
    attn = torch.cat([prompt_mask, torch.ones_like(completion)], dim=1)
    with torch.no_grad():
        sampled = token_logprobs(trainer.model, ids, attn, num_prompt_tokens=width)  # the sampler's positions
        trained, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, attn, logits_to_keep=6)
    assert_close(trained[1], sampled[1], MODEL)  # the unpadded row: the same either way
    if positions == "mask":
        assert_close(trained, sampled, MODEL)
    else:
        assert float((trained[0] - sampled[0]).abs().max()) > 1e-2  # the padded row, shifted


def test_the_positions_option_stays_out_of_the_keys_of_trials_it_cannot_change():
    """engine.positions is inert on the ablate engine and on addition with a character tokenizer (one prompt
    length): those trial keys, every committed one among them, are unchanged; a trl trial on countdown records it."""
    for inert in ({"engine.name": "ablate", "task.name": "countdown"}, {"engine.name": "trl", "task.name": "addition"}):
        assert TrialConfig.from_overrides(inert).trial_key() == \
            TrialConfig.from_overrides({**inert, "engine.positions": "trl"}).trial_key()
    trl = {"engine.name": "trl", "task.name": "countdown"}
    assert TrialConfig.from_overrides(trl).trial_key() != \
        TrialConfig.from_overrides({**trl, "engine.positions": "trl"}).trial_key()


def test_a_chat_template_model_is_trained_by_trl_on_the_templated_prompt_it_is_evaluated_on(tmp_path):
    """Issue 55: a local checkpoint with a chat template (micro-llama saved with a Jinja template): TRL gets
    conversational prompts, so the prompt ids it samples from equal the ids ablate's evaluation feeds
    (Policy.encode_prompt), not the raw text's; one RL step runs, the rewards graded on the completions' text."""
    from ablate.engines.trl import _dataset, build_trainer, make_scorer
    from ablate.models import load_policy
    from ablate.train import run_trial
    from ablate.train.setup import setup_trial

    policy = load_policy("micro-llama")
    policy.tokenizer.chat_template = ("{% for m in messages %}<think>{{ m['content'] }}</think>{% endfor %}"
                                      "{% if add_generation_prompt %}<answer>{% endif %}")
    ckpt = tmp_path / "chat-llama"
    policy.model.save_pretrained(ckpt)
    policy.tokenizer.save_pretrained(ckpt)
    c = micro_config(**{"model.name": str(ckpt), "task.difficulty": 1, "train.steps": 1})
    state = setup_trial(c)
    assert state.policy.use_chat_template
    trainer = build_trainer(state, make_scorer(state), tmp_path / "trl", save=False)
    prompts = _dataset(state)["prompt"][:3]
    ids = trainer._tokenize_prompts(prompts)[0]
    expected = [state.policy.encode_prompt(p.prompt) for p in state.train_pool[:3]]
    assert [list(x) for x in ids] == expected
    old = setup_trial(micro_config(**{"model.name": str(ckpt), "task.difficulty": 1, "engine.prompts": "text"}))
    before = build_trainer(old, make_scorer(old), tmp_path / "trl-text", save=False)
    raw = before._tokenize_prompts(_dataset(old)["prompt"][:3])[0]
    assert [list(x) for x in raw] != expected  # engine.prompts text, what TRL sampled from before: untemplated
    assert c.trial_key() != micro_config(**{"model.name": str(ckpt), "task.difficulty": 1, "train.steps": 1,
                                             "engine.prompts": "text"}).trial_key()
    logged: dict[str, float] = {}
    result = run_trial(c, lambda m, s: logged.update(m))
    assert "reward/total" in logged and result is not None


MY_REWARD = '''"""A user's reward plugin: a small cost per completion token, placed on its last token."""
from ablate.rewards import REWARDS, place_on_last_token


@REWARDS.register("short_answers")
def short_answers(ctx):
    return place_on_last_token(-0.01 * ctx.mask.sum(dim=1).float(), ctx.mask)
'''


@pytest.mark.slow
def test_my_model_my_data_my_reward_run_on_both_engines(workdir, capsys):
    """Issue 55, a model a user brings, end to end: a local Hugging Face checkpoint with its own tokenizer and
    chat template, a JSONL task and a reward plugin, one study whose factor is the engine (docs/factors.md's
    study, as printed there, with its paths filled in and a smoke budget added): both trials run from the same
    warm start on the same eval prompts, and the report is built. The plugin reward reaches TRL as a reward
    function (its token rewards summed per completion)."""
    import re
    from pathlib import Path

    import yaml
    from tasks.conftest import write_jsonl_data

    from ablate.cli import main
    from ablate.models import load_policy

    policy = load_policy("micro-llama")
    policy.tokenizer.chat_template = ("{% for m in messages %}<think>{{ m['content'] }}</think>{% endfor %}"
                                      "{% if add_generation_prompt %}<answer>{% endif %}")
    policy.model.save_pretrained(workdir / "my-model")
    policy.tokenizer.save_pretrained(workdir / "my-model")
    write_jsonl_data(workdir / "my-data.jsonl")
    (workdir / "plugins").mkdir()
    (workdir / "plugins" / "short_answers.py").write_text(MY_REWARD)
    page = (Path(__file__).resolve().parents[1] / "docs" / "factors.md").read_text()
    block = re.search(r"## My model, my data.*?```yaml\n(.*?)```", page, re.S).group(1)
    study = yaml.safe_load(block.replace("/path/to/my-model", str(workdir / "my-model")).replace(
        "/path/to/my-data.jsonl", str(workdir / "my-data.jsonl")))
    small = {k: v for k, v in MICRO.items() if k not in ("engine.name", "threads", "device", "task.difficulty",
                                                         "warmstart.enabled")}
    study["budgets"] = {"smoke": {**small, "train.steps": 2, "rollout.max_new_tokens": 24, "warmstart.max_steps": 4,
                                  "seeds": 1}}
    path = workdir / "mine.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    assert main(["validate", str(path)]) == 0
    assert main(["run", str(path), "--budget", "smoke", "--no-progress", "--threads", "1"]) == 0
    capsys.readouterr()
    import pandas as pd

    results = pd.read_csv(workdir / "reports" / "mine-smoke" / "results.csv")
    assert sorted(results["engine"]) == ["ablate", "trl"] and set(results["state"]) == {"done"}
    assert results["reward/short_answers"].notna().all() and (results["reward/short_answers"] < 0).all()
    assert (workdir / "reports" / "mine-smoke" / "index.html").is_file()
    curves = pd.read_csv(workdir / "reports" / "mine-smoke" / "curves.csv")
    start = curves[curves["step"] == 0].set_index("arm")["value"]
    assert len(start) == 2 and start.nunique() == 1  # one warm start, the same greedy eval prompts: one step-0 score

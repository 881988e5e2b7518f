"""The trainer: every reward granularity x aggregation x ratio level trains; accumulation,
determinism, resume and the NaN guard; per-problem eval records on eval problems fixed by the data seed."""

from __future__ import annotations

import json
import math
import warnings

import pytest
import torch
from conftest import TINY_TRIAL
from tolerance import MODEL, OPS, assert_close, is_close

from ablate.cli import main
from ablate.config import TrialConfig
from ablate.metrics import EVAL_PROBLEM_GLOSSARY
from ablate.models import decode_graph
from ablate.rewards import REWARDS
from ablate.train import (
    METRICS,
    NonFiniteError,
    metrics_glossary_markdown,
    run_trial,
    setup_trial,
    train_step,
)


def tiny(ws_cache: str, *overrides: str) -> TrialConfig:
    base = [*TINY_TRIAL, f"warmstart.cache_dir={ws_cache}"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return TrialConfig.from_overrides(base + list(overrides))


def params_of(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def changed(before: list[torch.Tensor], model: torch.nn.Module) -> bool:
    return any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


GRANULARITY = {
    "final": ["reward.components=[final_answer]"],
    "prm": ["reward.components=[final_answer, prm]"],
    "kl": ["reward.components=[final_answer, kl]", "kl.placement=reward", "kl.beta=0.1"],
    "format": ["reward.components=[final_answer, format]"],
}
AGGREGATION = {"token": ["loss.aggregation=token-mean"], "sequence": ["loss.aggregation=seq-mean-token-mean"]}
RATIO = {
    "token": ["loss.ratio_level=token"],
    "sequence": ["loss.ratio_level=sequence", "loss.clip_low=3e-4", "loss.clip_high=4e-4"],
}


@pytest.mark.parametrize("ratio", list(RATIO))
@pytest.mark.parametrize("agg", list(AGGREGATION))
@pytest.mark.parametrize("granularity", list(GRANULARITY))
def test_every_combination_trains(ws_cache, granularity, agg, ratio):
    cfg = tiny(ws_cache, *GRANULARITY[granularity], *AGGREGATION[agg], *RATIO[ratio])
    state = setup_trial(cfg)
    assert state.warmstart_report, "the warm start must run for zoo models"
    before = params_of(state.model)
    seen_nonzero_adv = False
    for step in (1, 2):
        metrics, batch = train_step(state, step)
        seen_nonzero_adv |= metrics["adv/std"] > 0
        for name in cfg.reward.components:
            assert f"reward/{name}" in metrics
        assert batch.token_rewards.shape == batch.mask.shape
        assert torch.all(batch.token_rewards[batch.mask == 0] == 0)
    assert seen_nonzero_adv, "the warm-started policy should produce reward variance in a group"
    assert changed(before, state.model), "parameters did not change"


@pytest.mark.parametrize(
    "extra",
    [
        ["algo.advantage=gae", "critic.enabled=true", "reward.components=[final_answer, kl]",
         "kl.placement=reward"],
        ["algo.advantage=grpo_process", "reward.components=[final_answer, prm]"],
        ["algo.advantage=rloo", "kl.placement=loss", "kl.beta=0.05", "loss.entropy_coef=0.01"],
        ["algo.advantage=dr_grpo", "loss.aggregation=seq-mean-token-sum-norm", "algo.dynamic_sampling=true"],
        ["loss.surrogate=cispo", "loss.aggregation=prompt-mean", "reward.overlong_filter=true",
         "reward.components=[final_answer, partial, missing_eos, soft_overlong]", "reward.soft_overlong.buffer=4"],
        ["loss.surrogate=sapo", "loss.dual_clip=null", "algo.ppo_epochs=2", "reward.prm.source=noisy",
         "reward.components=[final_answer, prm]"],
        ["loss.aggregation=balanced-mean", "reward.overlong_filter=true", "reward.overlong_baseline=include",
         "algo.zero_variance_filter=true", "algo.minibatches=2"],
    ],
    ids=["gae-critic-kl-reward", "grpo_process", "rloo-kl-loss-entropy", "dr_grpo-dynamic", "cispo-prompt-mean",
         "sapo-noisy-prm", "balanced-mean-dapo-overlong"],
)
def test_algorithm_variants_train(ws_cache, extra):
    cfg = tiny(ws_cache, *extra)
    state = setup_trial(cfg)
    before = params_of(state.model)
    critic_before = params_of(state.critic) if state.critic is not None else None
    metrics, _ = train_step(state, 1)
    train_step(state, 2)
    assert changed(before, state.model)
    if critic_before is not None:
        assert changed(critic_before, state.critic)
        assert "critic/explained_variance" in metrics and "loss/value" in metrics
        assert metrics["loss/value"] > 0


@pytest.mark.parametrize("options", [
    ["loss.aggregation=token-mean"], ["loss.aggregation=balanced-mean"],
    ["loss.aggregation=seq-mean-token-mean", "loss.ratio_level=sequence", "kl.placement=loss", "kl.beta=0.1"],
    ["loss.aggregation=seq-mean-token-sum-norm", "algo.advantage=gae", "critic.enabled=true"],
])
def test_accumulation_matches_full_batch(ws_cache, options, monkeypatch):
    """grad_accum splits each minibatch into length buckets cut to the positions their rows use; the update
    must not change (up to float rounding), for every per-token tensor the loss reads."""
    import ablate.train.update as update

    spans = []
    used_span = update.used_span
    monkeypatch.setattr(update, "used_span", lambda a, p: spans.append(used_span(a, p)) or spans[-1])
    grads: list[list[torch.Tensor]] = []
    clip = torch.nn.utils.clip_grad_norm_

    def record(params, max_norm):  # the accumulated gradient of each minibatch, before the optimizer
        params = list(params)
        grads[-1].append(torch.cat([q.grad.flatten() for q in params if q.grad is not None]))
        return clip(params, max_norm)

    results = []
    for accum in (1, 4):
        state = setup_trial(tiny(ws_cache, f"algo.grad_accum={accum}", *options))
        grads.append([])
        with monkeypatch.context() as patch:  # the RL step's gradients, not the warm start's
            patch.setattr(torch.nn.utils, "clip_grad_norm_", record)
            metrics, batch = train_step(state, 1)
        results.append((params_of(state.model), metrics))
    # the buckets ran on fewer positions than the batch carries (else this test would not test the cut)
    assert len(spans) == 4 * state.config.algo.minibatches * state.config.algo.ppo_epochs
    assert min(t for _, t in spans) < batch.mask.shape[1] and all(t <= batch.mask.shape[1] for _, t in spans)
    (p1, m1), (p4, m4) = results
    # the gradients, compared before the optimizer: Adam's first step is ~lr * sign(g), which turns a
    # near-zero entry's rounding into a move of up to lr (the aggregations' exact accumulation in float64 is
    # tests/rl/test_losses.py's); a model's backward over other bucket shapes sums in another order
    assert len(grads[0]) == len(grads[1]) > 0
    assert max(float(a.abs().max()) for a in grads[0]) > 0  # (a minibatch may carry no signal)
    for a, b in zip(*grads):
        assert_close(b, a, MODEL)
    assert m1["loss/policy"] == pytest.approx(m4["loss/policy"], abs=1e-6)
    assert m1["optim/grad_norm"] == pytest.approx(m4["optim/grad_norm"], rel=1e-4)


def _stable(history):
    return [(s, {k: v for k, v in m.items() if not k.startswith("perf/")}) for s, m in history]


def _same(h1, h2):
    assert len(h1) == len(h2)
    for (s1, m1), (s2, m2) in zip(h1, h2):
        assert s1 == s2 and m1.keys() == m2.keys()
        for k in m1:
            assert (math.isnan(m1[k]) and math.isnan(m2[k])) or m1[k] == m2[k], (s1, k, m1[k], m2[k])


def test_deterministic_on_cpu(ws_cache):
    cfg = tiny(ws_cache, "train.steps=2")
    a = run_trial(cfg)
    b = run_trial(cfg)
    _same(_stable(a.history), _stable(b.history))
    c = run_trial(tiny(ws_cache, "train.steps=2", "seed=1"))
    assert _stable(c.history) != _stable(a.history)


def test_static_decode_loop_trains_the_same_trial_on_cpu(ws_cache):
    """rollout.cuda_graph=true on CPU: the static loop, run eagerly, samples the same tokens for rollouts and
    evaluations, so the trial's history equals the ordinary loop's (its key differs: on CUDA rounding may)."""
    a = run_trial(tiny(ws_cache, "train.steps=2", "eval.every=1"))
    b = run_trial(tiny(ws_cache, "train.steps=2", "eval.every=1", "rollout.cuda_graph=true"))
    _same(_stable(a.history), _stable(b.history))
    assert "eval/accuracy" in b.final
    # the capture time is logged with the option (nothing is captured on a CPU), and only with it
    assert b.final["perf/graph_capture_s"] == 0.0 and "perf/graph_capture_s" not in a.final
    # the next trial (same model shape, other weights) samples through the samplers this one left
    kept = dict(decode_graph._SAMPLERS)
    c = run_trial(tiny(ws_cache, "train.steps=2", "eval.every=1", "seed=1"))
    d = run_trial(tiny(ws_cache, "train.steps=2", "eval.every=1", "seed=1", "rollout.cuda_graph=true"))
    _same(_stable(c.history), _stable(d.history))
    assert dict(decode_graph._SAMPLERS) == kept and kept  # reused: no sampler made or dropped


def test_resume_equals_uninterrupted(ws_cache, tmp_path):
    cfg = tiny(ws_cache, "train.steps=3", "train.checkpoint_every=1", "eval.every=2")
    full = run_trial(cfg)
    part = run_trial(cfg, workdir=tmp_path, stop_after=2)
    assert part.steps == 2 and (tmp_path / "trainer.pt").exists()
    rest = run_trial(cfg, workdir=tmp_path)
    assert rest.resumed_from == 2 and rest.steps == 3
    _same(_stable(full.history), _stable(rest.history))
    # the per-problem records of the evaluations before the checkpoint (steps 0, 2) come back from it
    assert [r["step"] for r in rest.eval_problems] == [0] * 8 + [2] * 8 + [3] * 8
    assert rest.eval_problems == full.eval_problems


@pytest.mark.parametrize("damage", ["truncated", "garbled", "foreign"])
def test_an_unreadable_checkpoint_is_moved_aside_and_the_trial_starts_over(ws_cache, tmp_path, damage):
    from ablate.train.checkpoint import CorruptCheckpointWarning

    cfg = tiny(ws_cache, "train.steps=3", "train.checkpoint_every=1", "eval.every=2")
    full = run_trial(cfg)
    run_trial(cfg, workdir=tmp_path, stop_after=2)
    ckpt = tmp_path / "trainer.pt"
    data = ckpt.read_bytes()
    if damage == "truncated":  # a disk that filled up while it was written
        ckpt.write_bytes(data[: len(data) // 2])
    elif damage == "garbled":
        ckpt.write_bytes(bytes(b ^ 0x5A for b in data[:4096]) + data[4096:])
    else:  # a readable file that is not an ablate checkpoint
        torch.save({"weights": torch.zeros(2)}, ckpt)
    with pytest.warns(CorruptCheckpointWarning, match=r"trainer\.pt: the checkpoint cannot be read .*moved to .*"
                                                      r"trainer\.pt\.corrupt; the trial starts again from step 0"):
        again = run_trial(cfg, workdir=tmp_path)
    assert again.resumed_from is None and again.steps == 3
    _same(_stable(full.history), _stable(again.history))  # from scratch: the uninterrupted result
    assert (tmp_path / "trainer.pt.corrupt").exists() and (tmp_path / "trainer.pt").exists()  # a good one again
    assert run_trial(cfg, workdir=tmp_path).resumed_from == 3  # and it is read back


def test_eval_records_agree_with_the_logged_eval_metrics(ws_cache):
    result = run_trial(tiny(ws_cache, "train.steps=2", "eval.every=1"))
    rows = result.eval_problems
    assert len(rows) == 8 * 3  # eval.n_problems x evaluations (steps 0, 1, 2)
    assert all(list(r) == list(EVAL_PROBLEM_GLOSSARY) for r in rows)
    logged = {s: m for s, m in result.history if "eval/accuracy" in m}
    assert sorted(logged) == [0, 1, 2]
    pairs = {"correct": "eval/accuracy", "step_accuracy": "eval/step_accuracy", "format_ok": "eval/format_rate",
             "partial": "eval/partial", "length": "eval/length", "truncated": "eval/truncated_frac"}
    for step, metrics in logged.items():
        mine = [r for r in rows if r["step"] == step]
        assert [r["problem"] for r in mine] == list(range(8))
        for column, metric in pairs.items():
            assert sum(r[column] for r in mine) / 8 == pytest.approx(metrics[metric]), (step, column)
        assert all(r[c] in (0, 1) for r in mine for c in ("correct", "format_ok", "truncated"))


def test_eval_problems_are_fixed_by_the_task_and_data_seed_not_the_trial_seed(ws_cache):
    prompts = lambda *o: [p.prompt for p in setup_trial(tiny(ws_cache, *o)).eval_problems]  # noqa: E731
    seed0 = prompts("seed=0")
    assert len(seed0) == 8 and prompts("seed=1") == seed0
    assert prompts("seed=1", "loss.aggregation=token-mean") == seed0  # another arm
    assert prompts("eval.n_problems=12")[:8] == seed0  # a larger evaluation extends a smaller one
    assert prompts("task.data_seed=1") != seed0


def test_nan_guard_names_step_and_quantity(ws_cache):
    @REWARDS.register("test_nan")
    def test_nan(ctx):
        out = torch.zeros(ctx.mask.shape)
        out[0, 0] = float("nan")
        return out

    try:
        cfg = tiny(ws_cache, "reward.components=[final_answer, test_nan]")
        with pytest.raises(NonFiniteError, match="non-finite rewards at RL step 1"):
            run_trial(cfg)
    finally:
        REWARDS.unregister("test_nan")


def _matches(name: str, pattern: str) -> bool:
    if "{" not in pattern:
        return name == pattern
    prefix, _, rest = pattern.partition("{")
    suffix = rest.partition("}")[2]
    return name.startswith(prefix) and name.endswith(suffix) and len(name) > len(prefix) + len(suffix)


def test_metric_glossary_matches_what_a_trial_logs(ws_cache):
    from pathlib import Path

    cfg = tiny(
        ws_cache, "algo.advantage=gae", "critic.enabled=true", "reward.components=[final_answer, kl]",
        "kl.placement=reward", "eval.pass_k=2", "train.steps=1", "algo.drop_solved_at=0.9", "rollout.cuda_graph=true",
    )
    logged: set[str] = set()
    run_trial(cfg, lambda m, s: logged.update(m))
    undocumented = [n for n in logged if not any(_matches(n, p) for p in METRICS)]
    assert not undocumented, f"metrics missing from the glossary: {undocumented}"
    never_logged = [p for p in METRICS if not any(_matches(n, p) for n in logged)]
    # these need options the run above does not use
    assert set(never_logged) <= {"loss/kl", "trl/{t}", *MISMATCH_METRICS} - logged, never_logged  # see test_bf16_rollouts_*; trl: test_trl_engine
    doc = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"
    assert doc.read_text() == metrics_glossary_markdown(), "regenerate: python -m ablate.metrics > docs/metrics.md"


def test_cli_train_json(ws_cache, capsys):
    args = ["train", "--json"]
    for item in tiny(ws_cache).changed_from_defaults().items():
        args += ["--set", f"{item[0]}={json.dumps(item[1])}"]
    args += ["--set", "train.steps=1"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["steps"] == 1 and "eval/accuracy" in out["final"]
    assert out["warmstart"]["steps"] > 0


@pytest.mark.parametrize(
    "scopes",
    [["algo.adv_std=batch"], ["algo.adv_std=none"], ["algo.adv_mean=batch", "algo.adv_std=batch"],
     ["algo.adv_mean=batch", "algo.adv_std=none"], ["algo.zero_variance_filter=true"], ["algo.drop_solved_at=0.5"],
     ["loss.ratio_level=sequence", "loss.aggregation=seq-mean-token-sum", "loss.clip_low=2e-3",
      "loss.clip_high=2.5e-3"]],
    ids=["lite-ppo", "grpo-std-none", "batch-zscore", "batch-mean", "zero-variance-filter", "drop-solved", "luspo"],
)
def test_cli_train_with_each_advantage_scope(ws_cache, capsys, scopes):
    """`ablate train` runs 2 steps with each new option of issue 13 that is not about precision (grpo's
    normalization scopes, ScaleRL's data choices, LUSPO) and logs finite values under its own key."""
    args = ["train", "--json"]
    for item in tiny(ws_cache).changed_from_defaults().items():
        args += ["--set", f"{item[0]}={json.dumps(item[1])}"]
    for scope in scopes:
        args += ["--set", scope]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["steps"] == 2 and out["key"] == tiny(ws_cache, *scopes).trial_key() != tiny(ws_cache).trial_key()
    for name in ("adv/mean", "adv/std", "loss/policy", "loss/total", "optim/grad_norm", "eval/accuracy",
                 "loss/normalizer"):
        assert out["final"][name] is not None and math.isfinite(out["final"][name]), name
    if "algo.drop_solved_at=0.5" in scopes:
        assert out["final"]["data/pool_size"] <= tiny(ws_cache).task.train_size


def test_cli_train_that_diverges_names_the_step_and_quantity(ws_cache, capsys):
    args = ["train", "--json"]
    for item in tiny(ws_cache).changed_from_defaults().items():
        args += ["--set", f"{item[0]}={json.dumps(item[1])}"]
    args += ["--set", "train.steps=3", "--set", "optim.lr=1.0e+30", "--set", "optim.max_grad_norm=null"]
    assert main(args) == 1
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert out["error"].startswith("non-finite ") and "at RL step" in out["error"]
    last = captured.err.strip().splitlines()[-1]  # (transformers may draw a loading bar above it)
    assert last.startswith("ablate train: the trial diverged: non-finite ") and "at RL step 1" in last
    assert "Traceback" not in captured.err


def test_cli_train_bad_override(capsys):
    assert main(["train", "--set", "loss.agregation=token-mean"]) == 2
    err = capsys.readouterr().err
    assert "loss.agregation" in err and "loss.aggregation" in err


def test_on_policy_update_skips_behaviour_forward_with_the_same_result(ws_cache):
    """One epoch of one minibatch: old_logp is the update's own detached log-prob (no extra forward)."""
    results = []
    for skip in (True, False):
        state = setup_trial(tiny(ws_cache, "algo.minibatches=1"))
        assert state.on_policy
        state.on_policy = skip
        metrics, batch = train_step(state, 1)
        assert (batch.old_logp is None) == skip
        assert metrics["policy/ratio_mean"] == pytest.approx(1.0, abs=1e-5)
        results.append(params_of(state.model))
    for a, b in zip(*results):
        assert_close(a, b, OPS)
    assert not setup_trial(tiny(ws_cache, "algo.minibatches=2")).on_policy


def test_sampler_behaviour_logp_trains_like_the_recomputed_one_up_to_rounding(ws_cache):
    """rollout.behaviour_logp=sampler with two minibatches: the same rollout, old_logp within rounding of
    the recomputed one, ratios ~1 on the first minibatch, and the same update up to float rounding."""
    runs = {}
    for source in ("recompute", "sampler"):
        state = setup_trial(tiny(ws_cache, "algo.minibatches=2", f"rollout.behaviour_logp={source}"))
        assert not state.on_policy
        metrics, batch = train_step(state, 1)
        runs[source] = (metrics, batch, params_of(state.model))
    (m_a, b_a, p_a), (m_b, b_b, p_b) = runs["recompute"], runs["sampler"]
    assert torch.equal(b_a.completion_ids, b_b.completion_ids)
    assert_close(b_a.old_logp, b_b.old_logp, MODEL)
    assert m_b["perf/rollout_s"] > 0 and abs(m_b["policy/ratio_mean"] - m_a["policy/ratio_mean"]) < 1e-4
    # Adam divides by the gradient's own scale, so a rounding difference in a near-zero gradient can move
    # that weight by up to ~lr: measured, 1.3e-5 at most (lr 1e-3), in 3e-5 of the weights
    diff = torch.cat([(a - b).abs().flatten() for a, b in zip(p_a, p_b)])
    assert float(diff.max()) < 1e-4 and float((diff > 1e-6).float().mean()) < 1e-3
    assert setup_trial(tiny(ws_cache, "rollout.behaviour_logp=sampler")).config.trial_key() != \
        setup_trial(tiny(ws_cache)).config.trial_key()


def test_eager_attention_trains_like_sdpa_up_to_rounding(ws_cache):
    """model.attention=eager reaches the trainer's model (and the reference copy the KL term uses): one
    step gives the same rollout (the lean decoder has its own attention) and the same update to rounding."""
    runs = {}
    for impl in ("sdpa", "eager"):
        state = setup_trial(tiny(ws_cache, f"model.attention={impl}", "kl.placement=loss"))
        assert state.model.config._attn_implementation == impl
        assert state.ref_model.config._attn_implementation == impl
        metrics, batch = train_step(state, 1)
        runs[impl] = (metrics, batch, params_of(state.model))
    (m_s, b_s, p_s), (m_e, b_e, p_e) = runs["sdpa"], runs["eager"]
    assert torch.equal(b_s.completion_ids, b_e.completion_ids)
    assert_close(b_s.old_logp, b_e.old_logp, MODEL)
    assert_close(b_s.ref_logp, b_e.ref_logp, MODEL)
    assert abs(m_s["loss/total"] - m_e["loss/total"]) < 1e-5
    diff = torch.cat([(a - b).abs().flatten() for a, b in zip(p_s, p_e)])
    assert float(diff.max()) < 1e-4 and float((diff > 1e-6).float().mean()) < 1e-3


MISMATCH_METRICS = ("mismatch/kl", "mismatch/max_ratio", "mismatch/corrected_frac")


@pytest.mark.parametrize(("correction", "extra"), [
    ("none", []), ("tis", []), ("mis", ["loss.rollout_correction_cap=5.0", "loss.rollout_correction_floor=0.5"]),
    ("tis", ["model.lm_head_dtype=float32"]),
])
def test_bf16_rollouts_with_an_fp32_trainer_log_the_mismatch_and_train_with_each_correction(
    ws_cache, capsys, correction, extra
):
    """ablate train, 2 steps: rollouts under bfloat16 autocast, the trainer in float32 (CPU, model.dtype=auto)."""
    args = ["train", "--json"]
    for path, value in tiny(ws_cache).changed_from_defaults().items():
        args += ["--set", f"{path}={json.dumps(value)}"]
    for item in ["rollout.dtype=bfloat16", f"loss.rollout_correction={correction}", *extra]:
        args += ["--set", item]
    assert main(args) == 0
    final = json.loads(capsys.readouterr().out)["final"]
    assert final["mismatch/kl"] > 0 and final["mismatch/max_ratio"] > 1.0  # bf16 sampling is off-policy
    assert ("mismatch/corrected_frac" in final) == (correction != "none")
    assert all(k in METRICS for k in final if k.startswith("mismatch/"))
    assert math.isfinite(final["loss/total"]) and "eval/accuracy" in final


def test_the_mismatch_is_measured_only_when_asked_for(ws_cache):
    """At the defaults the rollout's log-probs are PPO's old log-probs (no extra forward, no mismatch/*);
    with a correction the trainer recomputes them, so an on-policy update's ratio is exactly 1."""
    state = setup_trial(tiny(ws_cache))
    assert not state.measures_mismatch and state.rollout_amp_dtype is None
    metrics, _ = train_step(state, 1)
    assert not any(k.startswith("mismatch/") for k in metrics)
    state = setup_trial(tiny(ws_cache, "algo.minibatches=1", "rollout.dtype=bfloat16", "loss.rollout_correction=tis"))
    assert state.measures_mismatch and not state.on_policy and state.rollout_amp_dtype is torch.bfloat16
    metrics, batch = train_step(state, 1)
    assert batch.old_logp is not None and metrics["mismatch/kl"] > 0
    assert metrics["policy/ratio_mean"] == pytest.approx(1.0, abs=1e-6)  # trainer vs trainer, one minibatch


# ------------------------------------------------------------------- ScaleRL's data choices (issue 13)


def test_new_options_at_their_defaults_keep_every_trial_key():
    """Options added after results were committed leave the default key as it was (9a23c248bce1 before
    them); set, they change it."""
    assert TrialConfig().trial_key() == "9a23c248bce1"
    base = TrialConfig().trial_key()
    for override in ["algo.zero_variance_filter=true", "algo.drop_solved_at=0.9"]:
        assert TrialConfig.from_overrides([override]).trial_key() != base, override


def test_the_zero_variance_filter_drops_exactly_the_groups_without_variance_and_samples_no_more(ws_cache):
    from ablate.train.batch import collect_batch, groups_with_variance

    plain, _ = collect_batch(setup_trial(tiny(ws_cache, "seed=3")), 1)
    filtered, stats = collect_batch(setup_trial(tiny(ws_cache, "seed=3", "algo.zero_variance_filter=true")), 1)
    keep = groups_with_variance(plain)
    assert 0 < len(keep) < len(plain.prompts), "seed 3 should give a step with some zero-variance groups"
    assert filtered.prompts == [plain.prompts[g] for g in keep]
    assert filtered.texts == [t for t, g in zip(plain.texts, plain.group_ids.tolist()) if g in keep]
    assert stats.kept_groups_frac == len(keep) / len(plain.prompts) and stats.sample_rounds == 1.0
    assert stats.samples == plain.mask.shape[0]  # what was sampled, not what was kept


def test_solved_prompts_leave_the_pool_and_a_resumed_trial_keeps_the_pool(ws_cache, tmp_path):
    from ablate.train.batch import collect_batch, drop_solved

    state = setup_trial(tiny(ws_cache, "algo.drop_solved_at=0.5"))
    batch, _ = collect_batch(state, 1)
    correct = [float(g.answer_correct) for g in batch.grades]
    rates = {}
    for row, g in enumerate(batch.group_ids.tolist()):
        rates.setdefault(g, []).append(correct[row])
    solved = {batch.pool_ids[g] for g, r in rates.items() if sum(r) / len(r) >= 0.5}
    before = list(state.pool)
    assert drop_solved(state, batch) == len(solved) and state.pool == [i for i in before if i not in solved]

    cfg = tiny(ws_cache, "algo.drop_solved_at=0.25", "train.steps=3", "train.checkpoint_every=1", "eval.every=2")
    full = run_trial(cfg)
    sizes = [m["data/pool_size"] for _, m in full.history if "data/pool_size" in m]
    dropped = [m["data/solved_dropped"] for _, m in full.history if "data/solved_dropped" in m]
    assert len(sizes) == 3 and sizes[-1] == cfg.task.train_size - sum(dropped) and sum(dropped) > 0
    run_trial(cfg, workdir=tmp_path, stop_after=2)
    rest = run_trial(cfg, workdir=tmp_path)
    assert rest.resumed_from == 2
    _same(_stable(full.history), _stable(rest.history))


def test_the_loss_normalizer_is_logged_as_declared(ws_cache):
    """loss/normalizer: the mean over the step's 2 optimizer steps (minibatches of 8 of the 16
    completions, a seeded permutation) of what each divided its policy loss by."""
    from ablate.train.update import minibatches

    for agg in ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm", "prompt-mean"]:
        state = setup_trial(tiny(ws_cache, f"loss.aggregation={agg}", "algo.minibatches=2"))
        metrics, batch = train_step(state, 1)
        parts = minibatches(state, batch.mask.shape[0], 1, 0)
        expected = {
            "token-mean": sum(float(batch.mask[r].sum()) for r in parts) / 2,
            "seq-mean-token-mean": 8.0,
            "seq-mean-token-sum-norm": 16.0 * 8.0,  # rollout.max_new_tokens x sequences
            "prompt-mean": sum(len(set(batch.group_ids[r].tolist())) for r in parts) / 2,
        }[agg]
        assert metrics["loss/normalizer"] == expected, agg


def test_stream_zero_keeps_the_seeds_and_another_stream_changes_every_draw_but_not_the_start(ws_cache):
    """``stream`` is the A/A control's factor: 0 is the trial as before (key and history), 1 other draws
    from the same start policy (the same warm start, the same initial evaluation)."""
    from ablate.train.seeds import derive_seed, trial_stream

    assert TrialConfig.from_overrides(["stream=0"]).trial_key() == TrialConfig().trial_key()
    assert TrialConfig.from_overrides(["stream=1"]).trial_key() != TrialConfig().trial_key()
    cfg0 = tiny(ws_cache, "train.steps=2")
    cfg1 = tiny(ws_cache, "train.steps=2", "stream=1")
    assert trial_stream(cfg0) == (cfg0.seed,)
    assert trial_stream(cfg1) == (cfg1.seed, "stream=1")
    assert derive_seed(*trial_stream(cfg0), "rollout", 0) == derive_seed(cfg0.seed, "rollout", 0)
    a = run_trial(cfg0)
    b = run_trial(cfg1)
    first = lambda h: next(m for _, m in h if "eval/accuracy" in m)["eval/accuracy"]  # noqa: E731
    assert first(a.history) == first(b.history)  # greedy evaluation of the same start policy
    assert _stable(a.history) != _stable(b.history)


def test_optim_implementation_picks_torchs_adamw_and_changes_only_rounding(ws_cache):
    """optim.implementation: auto leaves torch's choice; the others are passed to AdamW. One optimizer
    step of the same trial (one minibatch) moves the parameters by the same amounts, up to float32
    rounding: the same algorithm (measured: fused differs from the loop by 4e-9 in an update of 1e-3)."""
    from ablate.train import train_step

    updates = {}
    for impl in ("auto", "for-loop", "foreach", "fused"):
        state = setup_trial(tiny(ws_cache, f"optim.implementation={impl}", "algo.minibatches=1"))
        d = state.optimizer.defaults
        assert (d["foreach"], d["fused"]) == {"auto": (None, None), "for-loop": (False, None),
                                              "foreach": (True, None), "fused": (None, True)}[impl]
        before = [p.detach().clone() for p in state.model.parameters()]
        train_step(state, 1)
        updates[impl] = [p.detach() - b for p, b in zip(state.model.parameters(), before)]
    assert max(float(u.abs().max()) for u in updates["auto"]) > 1e-4  # the step moved the weights
    assert all(torch.equal(a, b) for a, b in zip(updates["auto"], updates["for-loop"]))  # auto = the loop on CPU
    for impl in ("foreach", "fused"):
        assert all(is_close(a, b, OPS) for a, b in zip(updates["auto"], updates[impl])), impl


# ------------------------------------------------ overlong filter x zero-variance filters (issue 30)


def _hand_batch():
    """2 groups of 4 completions, reward 1 or 0 at the last token: group 0 [1, 1, 1, 0] whose 0 is a
    truncated completion, group 1 [1, 0, 0, 0] with nothing truncated."""
    from ablate.train.batch import StepBatch

    rewards = torch.tensor([1.0, 1, 1, 0, 1, 0, 0, 0])
    token_rewards = torch.zeros(8, 3)
    token_rewards[:, -1] = rewards
    return StepBatch(
        prompt_ids=torch.ones(8, 2, dtype=torch.long), prompt_mask=torch.ones(8, 2, dtype=torch.long),
        completion_ids=torch.ones(8, 3, dtype=torch.long), mask=torch.ones(8, 3), old_logp=None,
        group_ids=torch.tensor([0, 0, 0, 0, 1, 1, 1, 1]),
        truncated=torch.tensor([False, False, False, True, False, False, False, False]),
        token_rewards=token_rewards, step_mask=torch.zeros(8, 3), parts={}, grades=[], texts=[""] * 8,
        prompts=["p0", "p1"])


def _advantages(cfg, batch):
    from types import SimpleNamespace

    from ablate.train.update import update_inputs

    state = SimpleNamespace(config=cfg, critic=None, measures_mismatch=False)
    x = update_inputs(state, batch, step=1)
    return x.advantages, x.loss_mask


@pytest.mark.parametrize("flag", ["algo.zero_variance_filter=true", "algo.dynamic_sampling=true"])
def test_the_zero_variance_filters_keep_only_groups_whose_used_advantages_are_not_all_zero(flag):
    """Under reward.overlong_filter the truncated row leaves group 0's statistics, so [1, 1, 1] is
    constant and every advantage of group 0 is 0. The filters judge the same rows (algo.filter_on: used):
    group 0 is dropped. Judged on every row's raw reward (filter_on: all, the code before issue 30), it was
    kept with no non-zero advantage: this test's first assertion failed there."""
    from ablate.train.batch import filter_rows, groups_with_variance

    batch = _hand_batch()
    cfg = TrialConfig.from_overrides(["reward.overlong_filter=true", flag])
    keep = groups_with_variance(batch, filter_rows(cfg, batch))
    adv, loss_mask = _advantages(cfg, batch)
    for g in keep:  # every kept group carries gradient
        rows = batch.group_ids == g
        assert bool((adv[rows] * loss_mask[rows]).abs().sum() > 0), f"group {g} kept with every advantage 0"
    assert keep == [1]
    legacy = cfg.with_overrides(["algo.filter_on=all"])
    assert groups_with_variance(batch, filter_rows(legacy, batch)) == [0, 1]  # the old decision
    assert cfg.trial_key() != legacy.trial_key()


def test_dapos_semantics_keep_a_truncated_reward_in_its_groups_baseline():
    """reward.overlong_baseline include (DAPO, TRL's mask_truncated_completions): group 0's mean and
    unbiased std are those of [1, 1, 1, 0]: 0.75 and 0.5, so each correct row's advantage is
    (1 - 0.75) / (0.5 + 1e-6); the truncated row's loss is masked (advantage 0 on it). exclude: 0 for all."""
    batch = _hand_batch()
    include = TrialConfig.from_overrides(["reward.overlong_filter=true", "reward.overlong_baseline=include"])
    adv, loss_mask = _advantages(include, batch)
    assert_close(adv[:3], torch.full((3, 3), 0.25 / (0.5 + 1e-6)), OPS)
    assert bool((adv[3] == 0).all()) and bool((loss_mask[3] == 0).all())
    exclude = TrialConfig.from_overrides(["reward.overlong_filter=true"])
    adv_ex, _ = _advantages(exclude, batch)
    assert bool((adv_ex[:4] == 0).all()) and torch.equal(adv_ex[4:], adv[4:])  # group 1 is the same either way
    from ablate.train.batch import filter_rows, groups_with_variance

    with_filter = include.with_overrides(["algo.zero_variance_filter=true"])
    assert groups_with_variance(batch, filter_rows(with_filter, batch)) == [0, 1]  # group 0 has gradient now


def test_options_that_cannot_change_a_trial_stay_out_of_its_key():
    """algo.filter_on matters only with reward.overlong_filter and a zero-variance filter;
    reward.overlong_baseline only with reward.overlong_filter. Elsewhere neither changes the key."""
    base = TrialConfig()
    assert TrialConfig.from_overrides(["algo.filter_on=all"]).trial_key() == base.trial_key()
    assert TrialConfig.from_overrides(["reward.overlong_baseline=include"]).trial_key() == base.trial_key()
    on = TrialConfig.from_overrides(["reward.overlong_filter=true"])
    assert on.with_overrides(["reward.overlong_baseline=include"]).trial_key() != on.trial_key()
    assert on.with_overrides(["algo.filter_on=all"]).trial_key() == on.trial_key()  # no filter: inert
    both = on.with_overrides(["algo.dynamic_sampling=true"])
    assert both.with_overrides(["algo.filter_on=all"]).trial_key() != both.trial_key()


def test_the_trainer_passes_constant_groups_to_the_advantages():
    batch = _hand_batch()
    batch.token_rewards[:, -1] = 0.1  # one group of 8 whose members all scored 0.1
    batch.group_ids = torch.zeros(8, dtype=torch.long)
    batch.prompts = ["p0"]
    fmt = TrialConfig.from_overrides(["reward.components=[final_answer, format]"])
    new, _ = _advantages(fmt, batch)
    old, _ = _advantages(fmt.with_overrides(["algo.constant_groups=rounding"]), batch)
    assert bool((new == 0).all()) and float(old.abs().max()) > 0


# ------------------------------------------------ balanced-mean and groups whose rewards are all equal


def _equal_group_batch():
    """2 groups of 8 completions (a real step's group size), the reward at the last token: group 0 all
    0.3 (not exact in binary: the float32 group mean rounds), group 1 0.3, 0.7, 0.1, 0.7, 0.3, 0.9, 0.1, 0.5."""
    from ablate.train.batch import StepBatch

    token_rewards = torch.zeros(16, 3)
    token_rewards[:, -1] = torch.tensor([0.3] * 8 + [0.3, 0.7, 0.1, 0.7, 0.3, 0.9, 0.1, 0.5])
    return StepBatch(
        prompt_ids=torch.ones(16, 2, dtype=torch.long), prompt_mask=torch.ones(16, 2, dtype=torch.long),
        completion_ids=torch.ones(16, 3, dtype=torch.long), mask=torch.ones(16, 3), old_logp=None,
        group_ids=torch.tensor([0] * 8 + [1] * 8), truncated=torch.zeros(16, dtype=torch.bool),
        token_rewards=token_rewards, step_mask=torch.zeros(16, 3), parts={}, grades=[], texts=[""] * 16,
        prompts=["p0", "p1"])


def _update_inputs(overrides):
    from types import SimpleNamespace

    from ablate.train.update import update_inputs

    cfg = TrialConfig.from_overrides(["reward.components=[final_answer, format]", "loss.aggregation=balanced-mean",
                                      *overrides])
    return update_inputs(SimpleNamespace(config=cfg, critic=None, measures_mismatch=False), _equal_group_batch(), step=1)


def _balanced_grad(adv, mask, group_ids, signs):
    """d/dtheta of the balanced-mean loss of L_it = -A_it theta_it at theta = 1: each token's weight
    times -A_it (the policy gradient's shape, without a model); and the step's count of groups."""
    from ablate.rl import aggregate_loss, step_totals

    theta = torch.ones(mask.shape, dtype=torch.float64, requires_grad=True)
    totals = step_totals(mask, group_ids, signs)
    aggregate_loss(-adv.to(torch.float64) * theta, mask, "balanced-mean", group_ids=group_ids,
                   **totals.for_rows()).backward()
    return theta.grad, totals.balanced_groups


BALANCED_ESTIMATORS = {  # -> whether group 0's float32 advantage is the group mean's rounding (not 0)
    "grpo-std-group": (["algo.advantage=grpo"], False), "grpo-std-none": (["algo.adv_std=none"], True),
    "grpo-std-batch": (["algo.adv_std=batch"], True), "dr_grpo": (["algo.advantage=dr_grpo"], True),
    "rloo": (["algo.advantage=rloo"], True),
}


@pytest.mark.parametrize("name", list(BALANCED_ESTIMATORS))
def test_balanced_mean_counts_a_group_of_equal_rewards_as_zero_advantage(ws_cache, name, monkeypatch):
    """Under every group-baseline estimator group 0 (all 0.3) has advantage 0 by definition; in float32
    dr_grpo, rloo and grpo with std none or batch compute the group mean's rounding (1e-8 to 1e-7;
    grpo with a group std zeroes it exactly). The trainer's balanced-mean gradients (ppo_update on a
    micro-llama, 2 minibatches, each optimizer step's gradient) equal those of the same batch with group
    0's advantages set exactly to 0. Before the fix the signs came from the float advantages, which
    put group 0 into balanced-mean's subsets and its count of groups (2 instead of 1): the gradient of
    every minibatch holding both groups was halved."""
    import ablate.train.update as update
    from ablate.rl import row_signs

    overrides, rounds = BALANCED_ESTIMATORS[name]
    cfg = tiny(ws_cache, "reward.components=[final_answer, format]", "loss.aggregation=balanced-mean", *overrides)
    x = _update_inputs(overrides)
    rounding = float(x.advantages[:8].abs().max())
    assert x.advantages.dtype == torch.float32 and rounding < 1e-6 and (rounding > 0) == rounds
    assert torch.equal(x.signs[:8], torch.zeros(8)) and bool((x.signs[8:] != 0).all())
    if rounds:  # the float advantages' own signs count group 0 (what the trainer used before the fix)
        assert bool((row_signs(x.advantages, x.loss_mask)[:8] != 0).all())

    states = [setup_trial(cfg), setup_trial(cfg)]  # the same start (the warm start trains before the recording)
    grads: list[list[torch.Tensor]] = []
    clip = torch.nn.utils.clip_grad_norm_

    def record(params, max_norm):
        params = list(params)
        grads[-1].append(torch.cat([q.grad.flatten() for q in params if q.grad is not None]))
        return clip(params, max_norm)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", record)
    advantages = update.compute_advantages

    def zero_group_0(*args, **kwargs):
        adv, ret = advantages(*args, **kwargs)
        adv[:8] = 0.0
        return adv, ret

    for zeroed, state in zip((False, True), states):
        if zeroed:
            monkeypatch.setattr(update, "compute_advantages", zero_group_0)
        grads.append([])
        update.ppo_update(state, _equal_group_batch(), step=1)
    got, expected = grads
    assert len(got) == len(expected) == cfg.algo.minibatches == 2
    for g, e in zip(got, expected):
        assert float(e.abs().max()) > 0
        assert_close(g, e, OPS)


def test_balanced_mean_keeps_the_signs_where_an_equal_group_has_a_real_advantage():
    """grpo with a batch mean (group 0's 0.3 lies below the batch mean 0.3875: a real negative
    advantage), grpo's constant_groups: rounding (its 0.029 kept on purpose) and whitening (over
    tokens: with unequal lengths an equal group's whitened advantage is not 0) give the equal group
    the signs of its float advantages, as before; the process estimators are not group-baseline ones."""
    from ablate.rl import row_signs
    from ablate.rl.advantages import constant_groups_have_zero_advantage

    for overrides in (["algo.adv_mean=batch", "algo.adv_std=batch"], ["algo.constant_groups=rounding"],
                      ["algo.advantage=dr_grpo", "algo.whiten=true"]):
        x = _update_inputs(overrides)
        assert torch.equal(x.signs, row_signs(x.advantages, x.loss_mask)), overrides
        if "algo.whiten=true" not in overrides:
            assert bool((x.signs[:8] != 0).all()), overrides
    assert not constant_groups_have_zero_advantage("grpo_process") and not constant_groups_have_zero_advantage("gae")


# ------------------------------------------------ max-type metrics are the step's


def test_step_metric_takes_the_largest_of_a_max_and_the_mean_of_the_rest():
    from ablate.train.update import step_metric

    assert step_metric("policy/ratio_max", [1.0, 2.22, math.nan, 1.3]) == 2.22
    assert step_metric("mismatch/max_ratio", [1.5, 1.2]) == 1.5
    assert step_metric("x/ratio_min", [0.9, 0.7]) == 0.7
    assert step_metric("policy/ratio_mean", [1.0, 2.0, math.nan]) == 1.5
    assert step_metric("optim/grad_norm", [1.0, 3.0]) == 2.0  # "norm" is not "min"
    assert math.isnan(step_metric("policy/ratio_max", [math.nan]))


def test_ratio_max_is_the_step_s_largest_ratio_whatever_the_accumulation(ws_cache, monkeypatch):
    """policy/ratio_max is the largest token ratio exp(logp - old_logp) over every micro-batch of every
    minibatch and epoch of the step (2 minibatches x 2 epochs: after the first optimizer step the
    ratios leave 1), recomputed here from the log-probs the loss saw; it was the mean of the
    micro-batches' maxima (1.61 where the step's was 2.22 in a real trial), which also changed with
    algo.grad_accum. It is the same under grad_accum 1, 2 and 4 up to float rounding."""
    import ablate.train.update as update

    seen: list[float] = []
    loss_fn = update.policy_loss_from_config

    def record(logp, old_logp, advantages, mask, loss):
        seen.append(float(torch.exp(logp.detach() - old_logp.detach())[mask.bool()].max()))
        return loss_fn(logp, old_logp, advantages, mask, loss)

    monkeypatch.setattr(update, "policy_loss_from_config", record)
    logged = []
    for accum in (1, 2, 4):
        seen.clear()
        state = setup_trial(tiny(ws_cache, f"algo.grad_accum={accum}", "algo.ppo_epochs=2"))
        metrics, _ = train_step(state, 1)
        assert len(seen) == 2 * 2 * accum  # epochs x minibatches x micro-batches
        assert min(seen) < max(seen)  # the micro-batches' maxima differ: their mean is lower than the step's
        assert metrics["policy/ratio_max"] == pytest.approx(max(seen), rel=1e-6), accum
        logged.append(metrics["policy/ratio_max"])
    assert logged == pytest.approx([logged[0]] * 3, rel=1e-4)


# --------------------------------------------------------------------------- weight decay (issue 55)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gpt2", "tiny-qwen2"])
def test_weights_decay_where_transformers_trainer_decays(name):
    """optim.decay_params: weights decays exactly the parameters transformers' Trainer (and so TRL's
    GRPOTrainer) decays: no bias, no normalisation weight; the optimizer gets them at optim.weight_decay and
    the rest at 0, while weight decay 0 or decay_params all keep one group of every parameter."""
    from transformers import Trainer

    from ablate.models import load_policy
    from ablate.train.setup import _optimizer, decayed_parameter_names

    model = load_policy(name).model
    names = {n for n, _ in model.named_parameters()}  # a tied lm_head is named once, as its embedding
    assert decayed_parameter_names(model) == set(Trainer.get_decay_parameter_names(None, model))
    decayed = decayed_parameter_names(model) & names  # what the Trainer (and ablate) put in the decayed group
    assert decayed < names and not any("bias" in n or "norm" in n for n in decayed)
    config = TrialConfig.from_overrides({"model.name": name, "optim.weight_decay": 0.1})
    optimizer, _ = _optimizer(config, model, None)
    by_id = {id(p): n for n, p in model.named_parameters()}
    (on, off) = optimizer.param_groups
    assert {by_id[id(p)] for p in on["params"]} == decayed and on["weight_decay"] == 0.1
    assert {by_id[id(p)] for p in off["params"]} == names - decayed and off["weight_decay"] == 0.0
    for overrides in ({"optim.weight_decay": 0.0}, {"optim.weight_decay": 0.1, "optim.decay_params": "all"}):
        (one,) = _optimizer(TrialConfig.from_overrides({"model.name": name, **overrides}), model, None)[0].param_groups
        assert len(one["params"]) == len(names)


def test_decay_params_stays_out_of_the_trial_key_while_weight_decay_is_0():
    """Every committed trial ran with weight decay 0: its key is unchanged; with weight decay on, the key says
    which parameters decayed ('all', what ablate did before issue 55, keeps the old key)."""
    base = TrialConfig.from_overrides({})
    assert TrialConfig.from_overrides({"optim.decay_params": "all"}).trial_key() == base.trial_key()
    on = TrialConfig.from_overrides({"optim.weight_decay": 0.1})
    old = TrialConfig.from_overrides({"optim.weight_decay": 0.1, "optim.decay_params": "all"})
    assert on.trial_key() != old.trial_key() != base.trial_key()


def test_the_trl_map_sends_no_clipping_as_transformers_0_and_refuses_decaying_every_parameter():
    """Issue 55: optim.max_grad_norm null (no clipping) used to fail every trl trial with a TypeError; it maps to
    transformers' 0 ('set to 0 to disable'). decay_params all cannot be honoured by TRL: refused at validation."""
    from ablate.engines.trl_map import grpo_arguments, trl_refusals

    c = TrialConfig.from_overrides({"engine.name": "trl", "optim.max_grad_norm": None})
    assert grpo_arguments(c)["max_grad_norm"] == 0.0
    assert grpo_arguments(TrialConfig.from_overrides({"engine.name": "trl"}))["max_grad_norm"] == 1.0
    ok = TrialConfig.from_overrides({"engine.name": "trl", "optim.weight_decay": 0.1})
    assert not [p for p in trl_refusals(ok) if p.path.startswith("optim")]
    bad = {"engine.name": "trl", "optim.weight_decay": 0.1, "optim.decay_params": "all"}
    with pytest.raises(Exception, match="optim.decay_params"):
        TrialConfig.from_overrides(bad)


def test_a_critic_trial_runs_under_a_float64_default_dtype(ws_cache):
    """Issue 55: the critic's value head was created in torch's default dtype, so under a float64 default a
    float32 policy's critic failed at its first step; the head now takes the backbone's dtype."""
    cfg = tiny(ws_cache, "algo.advantage=gae", "critic.enabled=true", "train.steps=1")
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        from ablate.train.setup import Critic, setup_trial

        state = setup_trial(cfg)
        assert isinstance(state.critic, Critic) and state.critic.head.weight.dtype == torch.float32
        logged: dict[str, float] = {}
        run_trial(cfg, lambda m, s: logged.update(m))
    finally:
        torch.set_default_dtype(before)
    assert math.isfinite(logged["loss/value"])


def test_the_trl_map_refuses_an_entropy_bonus_over_several_processes():
    """Issue 55: TRL's entropy bonus over processes is a mean of per-rank token means (1.9e-3 relative gradient
    difference from ablate's token mean of the minibatch): refused, naming the fix."""
    from ablate.engines.trl_map import trl_refusals

    base = {"engine.name": "trl", "loss.aggregation": "token-mean", "loss.entropy_coef": 0.01}
    assert not [p for p in trl_refusals(TrialConfig.from_overrides(base)) if p.path == "loss.entropy_coef"]
    with pytest.raises(Exception, match="entropy bonus over several processes"):
        TrialConfig.from_overrides({**base, "engine.processes": 2})

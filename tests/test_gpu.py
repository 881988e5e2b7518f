"""On a CUDA device (skipped elsewhere): the lean decoder, log-probs, bf16 rollouts and a whole trial
run there and agree with the CPU. ``pytest -m gpu`` runs only these (benchmarks/gpu_check.sh does)."""

from __future__ import annotations

import pytest
import torch
from tolerance import MODEL, assert_close

from ablate.config import TrialConfig
from ablate.models import load_policy
from ablate.models.decode_graph import capture_seconds, clear_samplers, samplers_for
from ablate.models.fast_decode import FastLlamaDecoder, GenericDecoder
from ablate.models.logprobs import naive_token_logprobs, token_logprobs
from ablate.models.rollout import generate_rollouts, left_pad
from ablate.tasks import TASKS
from ablate.train import run_trial

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


@pytest.fixture(scope="module")
def prompts() -> list[str]:
    return [p.prompt for p in TASKS.get("addition")(difficulty=2, seed=0).sample("eval", 4, seed=0)]


def test_lean_decoder_on_cuda_matches_the_cpu(prompts):
    cpu = load_policy("tiny-llama", seed=1)
    gpu = load_policy("tiny-llama", seed=1, device="cuda")
    ids, mask = left_pad([cpu.encode_prompt(p) for p in prompts], 0)
    a = FastLlamaDecoder(cpu.model, ids, mask, 4)
    b = FastLlamaDecoder(gpu.model, ids.cuda(), mask.cuda(), 4)
    c = GenericDecoder(gpu.model, ids.cuda(), mask.cuda(), 4)
    with torch.no_grad():
        la, lb, lc = a.prefill(), b.prefill(), c.prefill()
        for _ in range(4):
            # TF32 may be on for CUDA matmuls (a 10-bit mantissa): agreement to ~1e-3, not to float32 rounding
            assert_close(lb.cpu(), la, MODEL, atol=2e-3)
            assert_close(lb, lc, MODEL, atol=2e-3)
            t = la.argmax(-1)
            la, lb, lc = a.step(t), b.step(t.cuda()), c.step(t.cuda())


def test_chunked_logprobs_on_cuda_equal_naive():
    gpu = load_policy("tiny-llama", seed=0, device="cuda")
    ids = torch.randint(3, 20, (6, 30), device="cuda")
    mask = torch.ones_like(ids)
    with torch.no_grad():
        ours = token_logprobs(gpu.model, ids, mask, num_prompt_tokens=8)
        ref = naive_token_logprobs(gpu.model, ids, mask, num_prompt_tokens=8)
    assert ours.device.type == "cuda"
    assert_close(ours, ref, MODEL)


def test_bf16_rollouts_on_cuda(prompts):
    gpu = load_policy("tiny-llama", seed=0, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        r = generate_rollouts(gpu, prompts, group_size=2, max_new_tokens=8,
                              generator=torch.Generator(device="cuda").manual_seed(0))
    assert r.completion_ids.device.type == "cuda" and torch.isfinite(r.old_logp).all()


def test_a_trial_trains_on_cuda():
    config = TrialConfig.from_overrides({
        "device": "cuda", "warmstart.enabled": False, "train.steps": 2, "eval.n_problems": 8,
        "rollout.prompts_per_step": 2, "rollout.group_size": 4, "model.dtype": "float32", "rollout.dtype": "bfloat16"})
    result = run_trial(config)
    assert result.steps == 2
    assert all(torch.isfinite(torch.tensor(v)) for k, v in result.final.items() if k.startswith("loss/"))
    assert result.final["mismatch/kl"] >= 0.0


def test_the_decode_loop_as_a_cuda_graph_samples_what_the_eager_loop_samples(prompts):
    """rollout.cuda_graph on CUDA: captured once, replayed per step and reused by the next rollout, also by
    another model of the same shape (the next trial's); the same tokens and generator state as the eager
    lean decoder (TF32 aside: the attention sums in another order)."""
    clear_samplers()
    gpu = load_policy("tiny-llama", seed=1, device="cuda")
    other = load_policy("tiny-llama", seed=2, device="cuda")  # the next trial: same shape, other weights
    runs = []
    for policy, graph in ((gpu, False), (gpu, True), (gpu, True), (other, False), (other, True)):
        gen = torch.Generator(device="cuda").manual_seed(0)
        r = generate_rollouts(policy, prompts, group_size=4, max_new_tokens=24, generator=gen, cuda_graph=graph,
                              behaviour_logp="sampler")
        runs.append((r, gen.get_state()))
    (a, sa), (b, sb), (c, sc), (d, sd), (e, se) = runs
    (sampler,) = samplers_for(gpu.model)
    assert sampler.graph is not None and sampler.capture_s > 0, sampler.capture_error  # captured once, then replayed
    assert capture_seconds(gpu.model) == sampler.capture_s  # what perf/graph_capture_s logs
    assert capture_seconds(other.model) == 0.0 and samplers_for(other.model) == [sampler]  # reused, not captured
    assert torch.equal(sa, sb) and torch.equal(sb, sc) and torch.equal(sd, se)
    assert torch.equal(b.completion_ids, c.completion_ids)  # a replay reproduces itself exactly
    assert not torch.equal(b.completion_ids, e.completion_ids)  # the other model's weights were copied in
    for eager, replayed in ((a, b), (d, e)):
        rows = (eager.completion_ids == replayed.completion_ids).all(-1)
        assert rows.float().mean().item() >= 0.9, rows  # the eager loop's tokens, but for a near-tie broken by rounding
        assert_close(eager.old_logp[rows], replayed.old_logp[rows], MODEL, atol=2e-3)  # TF32, as above


def test_a_trial_with_cuda_graph_decoding_trains_on_cuda():
    config = TrialConfig.from_overrides({
        "device": "cuda", "warmstart.enabled": False, "train.steps": 2, "eval.n_problems": 8, "eval.every": 1,
        "rollout.prompts_per_step": 2, "rollout.group_size": 4, "rollout.cuda_graph": True,
        "rollout.dtype": "bfloat16"})
    result = run_trial(config)
    assert result.steps == 2 and 0.0 <= result.final["eval/accuracy"] <= 1.0


def test_a_trial_on_cuda_is_tagged_with_its_gpu():
    from ablate.tracking import gpu_tags, machine_tags
    from ablate.tracking.results import processor_name

    tags = {**machine_tags(), **gpu_tags("cuda")}
    assert tags["ablate.machine.gpu"] == torch.cuda.get_device_name(0)
    assert processor_name(tags).startswith(f"{torch.cuda.get_device_name(0)} (GPU; host ")
    assert gpu_tags("cpu") == {}

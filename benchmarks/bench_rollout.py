"""Rollout speed against ``model.generate``, and log-prob peak memory against the naive log-softmax.

Run from the repository root::

    .venv/bin/python benchmarks/bench_rollout.py                      # defaults of the issue, 1 and 2 threads
    .venv/bin/python benchmarks/bench_rollout.py --threads 1 --compile # also time torch.compile
    .venv/bin/python benchmarks/bench_rollout.py --write-results benchmarks/RESULTS.md

1. Rollouts. One zoo model (default ``tiny-llama``, seed 0), 8 addition prompts x G = 8 = 64 rows,
   48 new tokens, temperature 1, top-p 1, EOS stops a row. In one process, interleaved over
   ``--repeats`` rounds after one warm-up call each, the script times:

   - ``ours (lean decoder)``: :func:`ablate.models.rollout.sample_completions` — prefill plus decode
     loop, the part :func:`generate_rollouts` reports as ``timing["generate_s"]``;
   - ``ours, full rollout``: all of :func:`generate_rollouts` (sampling, the ``old_logp`` forward and
     decoding texts with offsets), which ``generate`` does not do;
   - ``ours (generic decoder)``: the same loop through ``model.forward`` and a transformers cache;
   - ``ours (lean, torch.compile)`` with ``--compile``: its first call (compile time) is reported
     apart;
   - ``model.generate``: ``do_sample=True, top_k=0, top_p=1.0, temperature=1.0``, the same
     ``max_new_tokens``, ``eos_token_id`` and ``pad_token_id``, on the same left-padded prompt batch.

   ``tokens/s`` is batch x decode steps / seconds: every row is computed at every step by both (a row
   that has stopped is padded, not dropped), so this is the rate of token positions decoded;
   ``generated tokens/s`` counts only tokens up to and including each row's EOS (random draws differ
   between the implementations, so these counts differ a little). Medians over the repeats.

2. Log-prob memory. A model of the same shape with a 32k vocabulary, a batch in the rollout layout
   (``--lp-batch`` rows, ``--lp-prompt`` left-padded prompt and ``--lp-completion`` right-padded
   completion tokens). Each variant runs in a fresh subprocess: after building the model and the
   inputs, the process's peak resident set (``VmHWM``) is reset through ``/proc/self/clear_refs``, the
   variant runs once, and the peak minus the resident set just before it is reported — the memory
   the computation itself added at its peak, model and inputs excluded. Variants: ``token_logprobs``
   and the naive ``log_softmax(logits.float(), -1).gather(...)`` (full model forward), each under
   ``no_grad`` (behaviour log-probs) and as forward + backward (training).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ablate.models import load_policy  # noqa: E402
from ablate.models.logprobs import position_ids_from_mask, token_logprobs  # noqa: E402
from ablate.models.rollout import generate_rollouts, left_pad, sample_completions  # noqa: E402
from ablate.tasks import TASKS  # noqa: E402

BEGIN = "<!-- BEGIN rollouts-and-logprobs (written by benchmarks/bench_rollout.py) -->"
END = "<!-- END rollouts-and-logprobs -->"


# ---------------------------------------------------------------------------------------------------
# rollouts
# ---------------------------------------------------------------------------------------------------
def _completion_mask(new: torch.Tensor, stop_ids: list[int]) -> torch.Tensor:
    """[B, T] long: 1 up to and including each row's first stop id (everywhere when none)."""
    is_stop = torch.isin(new, torch.tensor(stop_ids)).long()
    stops_before = is_stop.cumsum(1) - is_stop  # stop tokens strictly before each position
    return (stops_before == 0).long()


def _generated_tokens(new: torch.Tensor, stop_ids: list[int]) -> int:
    """Tokens per row up to and including the first stop id (all of them when none), summed."""
    return int(_completion_mask(new, stop_ids).sum())


def bench_rollouts(args: argparse.Namespace) -> tuple[list[dict], dict]:
    policy = load_policy(args.model, seed=0)
    model = policy.model.eval()
    task = TASKS.get("addition")(seed=0)
    prompts = [p.prompt for p in task.sample("train", args.prompts, seed=0)]
    G, N = args.group_size, args.max_new_tokens
    ids, pmask = left_pad([policy.encode_prompt(p) for p in prompts], policy.pad_token_id)
    ids, pmask = ids.repeat_interleave(G, 0), pmask.repeat_interleave(G, 0)
    B = ids.shape[0]
    stop_ids = sorted({policy.eos_token_id, policy.pad_token_id})

    def ours(fast: bool, compile: bool = False, seed: int = 0) -> tuple[int, int]:
        gen = torch.Generator().manual_seed(seed)
        out, mask, steps = sample_completions(
            model, ids, pmask, max_new_tokens=N, stop_ids=stop_ids, pad_id=policy.pad_token_id,
            generator=gen, fast=fast, compile=compile,
        )
        return steps, int(mask.sum())

    def full(seed: int = 0) -> tuple[int, int]:
        gen = torch.Generator().manual_seed(seed)
        r = generate_rollouts(policy, prompts, group_size=G, max_new_tokens=N, generator=gen)
        return int(r.timing["steps"]), int(r.timing["tokens"])

    def hf(seed: int = 0, with_logp: bool = False) -> tuple[int, int]:
        torch.manual_seed(seed)
        with torch.no_grad():
            out = model.generate(
                input_ids=ids, attention_mask=pmask, do_sample=True, top_k=0, top_p=1.0, temperature=1.0,
                max_new_tokens=N, eos_token_id=policy.eos_token_id, pad_token_id=policy.pad_token_id,
            )
            new = out[:, ids.shape[1]:]
            mask = _completion_mask(new, stop_ids)
            if with_logp:  # what a rollout needs on top of generate: the sampled tokens' log-probs
                token_logprobs(model, out, torch.cat([pmask, mask], 1), num_prompt_tokens=ids.shape[1])
        return new.shape[1], int(mask.sum())

    def timed(fn, seed: int) -> tuple[float, float, int, int]:
        w0, c0 = time.perf_counter(), time.process_time()
        steps, generated = fn(seed)
        return time.perf_counter() - w0, time.process_time() - c0, steps, generated

    variants = {
        "ours (lean KV-cache decoder), sampling": lambda s: ours(True, seed=s),
        "ours (generic decoder: model.forward + HF cache)": lambda s: ours(False, seed=s),
        "transformers model.generate": hf,
        "ours, full rollout (sampling + old_logp forward + texts)": full,
        "model.generate + old_logp forward (token_logprobs)": lambda s: hf(s, with_logp=True),
    }
    extra: dict = {}
    if args.compile:
        t0 = time.perf_counter()
        ours(True, compile=True)
        extra["compile_first_call_s"] = time.perf_counter() - t0
        variants["ours (lean decoder, torch.compile), sampling"] = lambda s: ours(True, compile=True, seed=s)
    for fn in variants.values():  # warm-up: first-call costs (lazy imports, kernel selection)
        fn(0)
    runs: dict[str, list[tuple[float, float, int, int]]] = {k: [] for k in variants}
    for r in range(args.repeats):
        for name, fn in variants.items():
            runs[name].append(timed(fn, r + 1))
    rows = []
    for name, rs in runs.items():
        rows.append({
            "variant": name,
            "seconds": statistics.median(w for w, _, _, _ in rs),
            "ms_per_step": statistics.median(1000 * w / st for w, _, st, _ in rs),
            "cpu_ms_per_step": statistics.median(1000 * c / st for _, c, st, _ in rs),
            "tokens_per_s": statistics.median(B * st / w for w, _, st, _ in rs),
            "generated_tokens_per_s": statistics.median(g / w for w, _, _, g in rs),
            "steps": statistics.median(st for _, _, st, _ in rs),
        })
    base = next(r for r in rows if r["variant"] == "transformers model.generate")
    base_full = next(r for r in rows if r["variant"].startswith("model.generate + old_logp"))
    for r in rows:
        ref = base_full if "old_logp" in r["variant"] else base
        r["speedup"] = r["tokens_per_s"] / ref["tokens_per_s"]
    extra.update({"batch": B, "prompts": len(prompts), "group_size": G, "max_new_tokens": N,
                  "prompt_tokens": ids.shape[1], "model": args.model,
                  "params": sum(p.numel() for p in model.parameters())})
    return rows, extra


# ---------------------------------------------------------------------------------------------------
# log-prob memory (one subprocess per variant)
# ---------------------------------------------------------------------------------------------------
def _rss_kb(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def memory_child(args: argparse.Namespace) -> None:
    """Runs in a subprocess: one variant, prints a JSON line with its peak memory and time."""
    from transformers import AutoModelForCausalLM

    if args.threads:
        torch.set_num_threads(args.threads)
    config = load_policy(args.model).model.config
    config.vocab_size = args.vocab
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    model.train()  # no dropout in the zoo configs; the trainer's mode
    B, P, T = args.lp_batch, args.lp_prompt, args.lp_completion
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, args.vocab, (B, P + T), generator=g)
    mask = torch.ones(B, P + T, dtype=torch.long)
    for b in range(B):  # a little of both paddings: prompts left-padded, completions right-padded
        mask[b, : b % 4] = 0
        mask[b, P + T - 8 * (b % 3):] = 0
    variant, mode = args.memory_child
    grad = mode == "grad"

    def run() -> None:
        with torch.set_grad_enabled(grad):
            if variant == "ours":
                logp = token_logprobs(model, ids, mask, num_prompt_tokens=P)
            else:
                logits = model(input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask),
                               use_cache=False).logits
                logp = torch.log_softmax(logits[:, P - 1 : -1].float(), -1).gather(
                    -1, ids[:, P:].unsqueeze(-1)).squeeze(-1)
            if grad:
                (logp * mask[:, P:]).sum().backward()

    gc.collect()
    before = _rss_kb("VmRSS")
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # reset VmHWM (the peak resident set) to the current resident set
        method = "VmHWM after reset"
    except OSError:
        method = "VmHWM (not resettable: includes setup)"
    t0 = time.perf_counter()
    run()
    seconds = time.perf_counter() - t0
    peak = _rss_kb("VmHWM")
    print(json.dumps({"variant": variant, "mode": mode, "peak_delta_mb": (peak - before) / 1024,
                      "seconds": seconds, "method": method}))


def bench_memory(args: argparse.Namespace) -> list[dict]:
    rows = []
    for mode in ("no_grad", "grad"):
        for variant in ("ours", "naive"):
            cmd = [sys.executable, __file__, "--memory-child", variant, mode, "--model", args.model,
                   "--vocab", str(args.vocab), "--lp-batch", str(args.lp_batch), "--lp-prompt", str(args.lp_prompt),
                   "--lp-completion", str(args.lp_completion)]
            if args.threads:
                cmd += ["--threads", str(args.threads)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT)
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return rows


# ---------------------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------------------
def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(line.split(":", 1)[1].strip() for line in fh if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    import transformers

    return (f"{cpu}, {os.cpu_count()} CPU cores, torch {torch.__version__}, transformers {transformers.__version__}, "
            f"Python {platform.python_version()}")


def rollout_table(args: argparse.Namespace, threads: int, rows: list[dict], extra: dict) -> list[str]:
    lines = [
        f"### Rollout throughput, {threads} intra-op thread{'s' if threads > 1 else ''}: `{extra['model']}` "
        f"({extra['params']:,} parameters), batch {extra['batch']} ({extra['prompts']} prompts x "
        f"G={extra['group_size']}), {extra['prompt_tokens']} prompt tokens (left-padded), "
        f"{extra['max_new_tokens']} new tokens, temperature 1, top-p 1, EOS stops a row",
        "",
        "| variant | ms / step | CPU ms / step | tokens/s | generated tokens/s | vs generate (same work) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['variant']} | {r['ms_per_step']:.2f} | {r['cpu_ms_per_step']:.2f} | "
                     f"{r['tokens_per_s']:,.0f} | {r['generated_tokens_per_s']:,.0f} | {r['speedup']:.2f}x |")
    if "compile_first_call_s" in extra:
        lines += ["", f"torch.compile: the first call (compilation included) took {extra['compile_first_call_s']:.1f} s "
                      "(inductor caches compiled graphs on disk; a new shape compiles again)."]
    return lines + [""]


def markdown(args: argparse.Namespace, rollouts: list[tuple[int, list[dict], dict]], memory_rows: list[dict],
             load: tuple[float, float]) -> str:
    lines = [
        "## Rollouts and log-probs",
        "",
        f"Measured {datetime.date.today().isoformat()} on {machine()}, by "
        f"`python benchmarks/bench_rollout.py {' '.join(sys.argv[1:])}`. The machine is shared: its "
        f"1-minute load average was {load[0]:.1f} at the start and {load[1]:.1f} at the end of the run "
        "(2 cores), so absolute times are noisy; ratios come from runs interleaved in one process.",
        "",
    ]
    goals = []
    for threads, rows, _ in rollouts:
        lean = next(r for r in rows if r["variant"].startswith("ours (lean KV-cache"))
        line = (f"- rollouts >= 2x `generate` tokens/s, {threads} thread{'s' if threads > 1 else ''}: lean "
                f"decoder {lean['speedup']:.2f}x ({'met' if lean['speedup'] >= 2 else 'not met'} in this run)")
        comp = next((r for r in rows if "torch.compile" in r["variant"]), None)
        if comp is not None:
            line += f"; with torch.compile {comp['speedup']:.2f}x"
        goals.append(line)
    if memory_rows:
        by = {(r["variant"], r["mode"]): r["peak_delta_mb"] for r in memory_rows}
        ratios = {m: by[("ours", m)] / by[("naive", m)] for m in ("no_grad", "grad")}
        met = all(v <= 0.25 for v in ratios.values())
        goals.append(f"- log-prob peak memory <= 1/4 of naive: {ratios['no_grad']:.2f} without gradients, "
                     f"{ratios['grad']:.2f} with forward + backward ({'met' if met else 'not met'})")
    if goals:
        lines += ["Goals of issue 3:", "", *goals, ""]
    if rollouts:
        lines += [
            f"Rollout tables: medians of {args.repeats} interleaved runs after one warm-up each. ms / step = "
            "wall time / decode steps; CPU ms / step = process CPU time / decode steps (other processes on "
            "the machine inflate it less than wall time); tokens/s = batch x decode steps / wall s (a "
            "stopped row is still carried by both implementations' tensors, except where the lean decoder "
            "drops it); generated = tokens up to each row's EOS; vs generate = tokens/s ratio to "
            "`model.generate` (rows that include the old_logp forward: to `model.generate` + that forward).",
            "",
        ]
        for threads, rows, extra in rollouts:
            lines += rollout_table(args, threads, rows, extra)
    if memory_rows:
        lines += [
            f"### Log-prob peak memory: vocabulary {args.vocab:,}, batch {args.lp_batch}, {args.lp_prompt} prompt + "
            f"{args.lp_completion} completion tokens",
            "",
            "Peak resident memory added by the computation (fresh subprocess per row; "
            f"{memory_rows[0]['method']}; model and inputs excluded, the model's own activations included). "
            f"For scale: one float32 [B, T, V] tensor is "
            f"{args.lp_batch * args.lp_completion * args.vocab * 4 / 2**20:,.0f} MiB.",
            "",
            "| computation | mode | peak MiB | seconds | ours / naive |",
            "|---|---|---:|---:|---:|",
        ]
        by = {(r["variant"], r["mode"]): r for r in memory_rows}
        names = {"ours": "`token_logprobs` (chunked)", "naive": "naive `log_softmax(logits.float()).gather`"}
        for mode in ("no_grad", "grad"):
            label = "no_grad (behaviour log-probs)" if mode == "no_grad" else "forward + backward"
            for variant in ("ours", "naive"):
                r = by[(variant, mode)]
                ratio = r["peak_delta_mb"] / by[("naive", mode)]["peak_delta_mb"]
                lines.append(f"| {names[variant]} | {label} | {r['peak_delta_mb']:,.0f} | {r['seconds']:.2f} | "
                             f"{ratio:.2f} |")
        lines.append("")
    return "\n".join(lines)


def write_section(path: Path, body: str) -> None:
    """Replace (or append) the delimited section of this benchmark in ``path``; the rest is kept."""
    text = path.read_text() if path.exists() else "# Benchmarks\n\n"
    block = f"{BEGIN}\n{body.rstrip()}\n{END}"
    if BEGIN in text and END in text:
        start, stop = text.index(BEGIN), text.index(END) + len(END)
        text = text[:start] + block + text[stop:]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", default="1,2",
                    help="comma-separated torch intra-op thread counts for the rollout tables (memory: the first)")
    ap.add_argument("--compile", action="store_true", help="also time the lean decoder under torch.compile")
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--lp-batch", type=int, default=16)
    ap.add_argument("--lp-prompt", type=int, default=32)
    ap.add_argument("--lp-completion", type=int, default=224)
    ap.add_argument("--skip-rollouts", action="store_true")
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--write-results", type=Path, default=None, help="update this file's rollouts section")
    ap.add_argument("--memory-child", nargs=2, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    thread_counts = [int(t) for t in str(args.threads).split(",") if t.strip()]
    args.threads = thread_counts[0] if thread_counts else 0
    if args.memory_child:
        memory_child(args)
        return 0
    load_start = os.getloadavg()[0]
    rollouts = []
    if not args.skip_rollouts:
        for threads in thread_counts:
            torch.set_num_threads(threads)
            rows, extra = bench_rollouts(args)
            rollouts.append((threads, rows, extra))
    memory_rows = bench_memory(args) if not args.skip_memory else []
    report = markdown(args, rollouts, memory_rows, (load_start, os.getloadavg()[0]))
    print(report)
    if args.write_results:
        write_section(args.write_results, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

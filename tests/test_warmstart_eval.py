"""A trial's step-0 evaluation is its warm start's own evaluation of the same policy on the same problems
(issue 54).

The generalization study's arith / tiny-qwen2 trials evaluated 0.006 at step 0 from a warm start that had
evaluated 0.203 on the same first 128 eval problems: transformers' AutoTokenizer loaded the cached warm
start's character tokenizer as Qwen2Tokenizer, whose byte-level pre-tokenizer dropped every space of the
prompts ("Calculate 69 - 1." became "Calculate69-1."), while the warm start was trained and evaluated with
the tokenizer as built. The tests here train a few SFT steps of the real tiny-qwen2 on the real
basic_arithmetic setting, so they take seconds.
"""

from __future__ import annotations

import json

import pytest
import torch
from tolerance import EXACT, assert_close

from ablate.config import TrialConfig
from ablate.config.schema import TOKENIZER_ALIKE_MODELS
from ablate.errors import AblateError
from ablate.models import MODELS, load_policy, save_policy
from ablate.models.checkpoint import POLICY_FILE, load_checkpoint
from ablate.models.evaluate import evaluate_with_records
from ablate.tasks import TASKS
from ablate.train import run_trial
from ablate.train.evaluate import eval_problem_rows

pytestmark = pytest.mark.usefixtures("one_thread")

#: The study's arith level (studies/generalization.yaml): prompts with spaces, e.g. "Calculate 69 - 1."
ARITH = {"task.name": "reasoning_gym", "task.dataset": "basic_arithmetic",
         "task.options": {"min_terms": 2, "max_terms": 2, "max_digits": 2, "operators": ["+", "-"],
                          "allow_parentheses": False, "allow_negation": False}}
#: A warm start of 40 SFT steps (one evaluation of its 128 eval problems, at the last step; by then its
#: completions depend on the prompt: under the pre-issue-54 tokenizer its format rate on them is 0.52, not
#: 0.88) and a trial of one RL step whose evaluations hold those 128 problems (task.data_seed = warmstart.seed = 0).
TINY = {"model.name": "tiny-qwen2", "device": "cpu", "warmstart.max_steps": 40, "warmstart.batch_size": 16,
        "warmstart.lr": 3e-3,
        "rollout.max_new_tokens": 12, "rollout.prompts_per_step": 2, "rollout.group_size": 2,
        "train.steps": 1, "eval.every": 0, "eval.n_problems": 128, "seed": 0}
#: warm-start evaluation metric -> the trial's metric of the same greedy completions
SAME = {"accuracy": "eval/accuracy", "format_rate": "eval/format_rate", "partial": "eval/partial",
        "mean_length": "eval/length", "truncated_rate": "eval/truncated_frac"}
#: A prompt the zoo's character tokenizer and a qwen2 AutoTokenizer encode differently (spaces, a newline).
SPACED = "Calculate 69 - 1.\n<think>5+9=14</think><answer> 68</answer>"


def _step0_rows(result) -> list[dict]:
    return [row for row in result.eval_problems if row["step"] == 0]


def test_a_trial_s_step_0_evaluation_is_its_warm_start_s_own(tmp_path):
    pytest.importorskip("reasoning_gym")
    config = TrialConfig.from_overrides({**ARITH, **TINY, "warmstart.cache_dir": str(tmp_path)})
    assert config.model.tokenizer == "saved"
    cold = run_trial(config)  # builds the warm start in this process
    warm = run_trial(config)  # loads it from the cache, as every other trial of a study does
    assert not cold.warmstart["cached"] and warm.warmstart["cached"]
    own = cold.warmstart["history"][-1]  # the warm start's last evaluation: its reported accuracy
    assert own["num_problems"] == 128 and own["accuracy"] == cold.warmstart["eval_accuracy"]
    assert own["format_rate"] > 0  # a policy that writes the format: its completions depend on the prompt
    for result in (cold, warm):
        step, metrics = result.history[0]
        assert step == 0
        assert_close([metrics[m] for m in SAME.values()], [own[k] for k in SAME], EXACT)
    assert _step0_rows(warm) == _step0_rows(cold)  # problem by problem, whoever built the warm start

    # problem by problem: the cached weights with the zoo's own tokenizer (the warm start as trained and
    # evaluated) on the warm start's eval problems, drawn as warmstart.py draws them
    trained = load_policy("tiny-qwen2", seed=0)
    cached = load_checkpoint(f"{cold.warmstart['path']}/policy")
    trained.model.load_state_dict(cached.model.state_dict())
    task = TASKS.get("reasoning_gym")(seed=0, dataset="basic_arithmetic", **ARITH["task.options"])
    problems = task.sample("eval", 128, seed=0)
    metrics, records = evaluate_with_records(trained, task, problems, max_new_tokens=TINY["rollout.max_new_tokens"])
    assert_close([metrics[k] for k in SAME], [own[k] for k in SAME], EXACT)
    assert eval_problem_rows(0, records) == _step0_rows(cold)


def test_every_zoo_architecture_loads_its_tokenizer_as_saved(tmp_path):
    """save_policy then load_checkpoint gives back the zoo's tokenizer (ids of a spaced prompt); the trial
    key leaves model.tokenizer out for TOKENIZER_ALIKE_MODELS only where AutoTokenizer ('auto') loads alike."""
    by_architecture: dict[str, str] = {}
    for name in MODELS.names():
        entry = MODELS.get(name)
        if not entry.pretrained:
            by_architecture.setdefault(entry.architecture, name)
    alike = {}
    for architecture, name in by_architecture.items():
        policy = load_policy(name, seed=0)
        save_policy(policy, tmp_path / name)
        want = policy.tokenizer.encode(SPACED, add_special_tokens=False)
        assert load_checkpoint(tmp_path / name).tokenizer.encode(SPACED, add_special_tokens=False) == want, name
        auto = load_checkpoint(tmp_path / name, tokenizer="auto").tokenizer
        alike[architecture] = auto.encode(SPACED, add_special_tokens=False) == want
    for name in MODELS.names():
        entry = MODELS.get(name)
        if name in TOKENIZER_ALIKE_MODELS and not entry.pretrained:
            assert alike[entry.architecture], f"{name} is in TOKENIZER_ALIKE_MODELS but AutoTokenizer loads it otherwise"

    # a tokenizer that loads other than it was saved is refused, not used
    path = tmp_path / "tiny-qwen2"
    meta = json.loads((path / POLICY_FILE).read_text())
    meta["tokenizer_probe"]["ids"] = meta["tokenizer_probe"]["ids"][1:]
    (path / POLICY_FILE).write_text(json.dumps(meta))
    with pytest.raises(AblateError, match="encodes text differently"):
        load_checkpoint(path)
    assert isinstance(load_checkpoint(path, tokenizer="auto").model, torch.nn.Module)  # auto checks nothing


def test_model_tokenizer_is_in_the_trial_key_only_where_it_can_matter():
    def key(**overrides) -> str:
        return TrialConfig.from_overrides(overrides).trial_key()

    qwen_arith = {**ARITH, "model.name": "tiny-qwen2"}
    assert key(**qwen_arith) != key(**qwen_arith, **{"model.tokenizer": "auto"})
    for inert in ({**ARITH, "model.name": "tiny-llama"}, {**ARITH, "model.name": "tiny-gpt2"},
                  {"model.name": "tiny-qwen2", "task.name": "addition", "task.difficulty": 2},
                  {**qwen_arith, "warmstart.enabled": False}):
        assert key(**inert) == key(**inert, **{"model.tokenizer": "auto"}), inert

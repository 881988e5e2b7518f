"""``reasoning_gym``: the procedural reasoning tasks of the reasoning-gym library, with its own scorers.

reasoning-gym (Stojanovski et al. 2025, https://github.com/open-thought/reasoning-gym) has 100+
generators of verifiable problems (arithmetic, algebra, logic, puzzles, graphs, ...), each with an
answer scorer; RL-for-LLM papers train on them. It is an optional extra::

    pip install 'ablate[reasoning-gym]'

A study picks a generator with ``task.dataset`` and passes the generator's own configuration as task
options::

    base:
      task.name: reasoning_gym
      task.dataset: basic_arithmetic          # a generator name (`python -c "import reasoning_gym.factory as f; print(sorted(f.DATASETS))"`)
      task.options: {min_terms: 2, max_terms: 3, max_digits: 2}

- The **final-answer reward** is the generator's scorer on the completion's ``<answer>`` part: correct
  when it scores 1. Its score in [0, 1] is the **partial credit** (``reward.components: [partial]``),
  for the generators that score partially.
- The **format reward** works as for the built-in tasks (the ``<think>``/``<answer>`` format of
  :mod:`ablate.tasks.format`).
- **Step rewards** are refused: no generator gives verifiable intermediate steps through this task, so
  ``prm`` and ``grpo_process`` are a configuration error (one message, before anything runs).
- The reference completion (for a warm start) is the generator's answer in the format, with an empty
  ``<think>`` part.
- Splits: problems are drawn from the generator's seeded stream (``task.data_seed``) and hashed into
  train or eval by their prompt (``eval_fraction``, 0.1), as for the built-in generated tasks.
  ``task.difficulty`` is not used: the generator's options set it.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any, ClassVar

from ablate.errors import AblateError
from ablate.tasks.base import TASKS, Grade, Problem
from ablate.tasks.common import EVAL_FRACTION_DOC, GeneratedTask, nearest
from ablate.tasks.format import parse_completion, render_completion

#: The task options that are ablate's, not the generator's.
OWN_OPTIONS = ("dataset", "eval_fraction")
#: The generator's config fields that ablate sets itself.
SET_BY_ABLATE = ("seed", "size")
INSTALL = "pip install 'ablate[reasoning-gym]'"
#: The message of a reasoning_gym task without its generator.
NO_DATASET = "task 'reasoning_gym' needs task.dataset: the name of a reasoning-gym generator, e.g. basic_arithmetic"


def _factory() -> Any:
    try:
        import reasoning_gym.factory as factory
    except ImportError:
        raise AblateError(f"task 'reasoning_gym' needs the reasoning-gym package, which is not installed: "
                          f"{INSTALL}") from None
    return factory


@TASKS.register("reasoning_gym")
class ReasoningGymTask(GeneratedTask):
    """A reasoning-gym generator (``dataset`` option, or ``task.dataset``) with its own answer scorer;
    every other option is the generator's configuration. See the module docstring."""

    name: ClassVar[str] = "reasoning_gym"
    description: ClassVar[str] = "reasoning-gym's procedural reasoning tasks and scorers (optional extra)"
    DIFFICULTY: ClassVar[str] = "not used (the generator's options set it)"
    OPTIONS: ClassVar[dict[str, str]] = {
        "dataset": "the reasoning-gym generator's name (required; task.dataset sets it)",
        "eval_fraction": EVAL_FRACTION_DOC,
        "<generator option>": "any field of the generator's configuration (e.g. basic_arithmetic's max_terms)",
    }
    #: no verifiable intermediate steps: prm is refused for it (ablate.config.rules reads this)
    has_steps: ClassVar[bool] = False
    #: the options ``ablate tasks`` shows an example with when none are given
    EXAMPLE_OPTIONS: ClassVar[dict[str, Any]] = {"dataset": "basic_arithmetic"}

    @classmethod
    def option_problems(cls, options: dict[str, Any]) -> list[tuple[str, str]]:
        """A missing generator name (its options are the generator's, checked where reasoning-gym is installed)."""
        dataset = options.get("dataset")
        return [] if isinstance(dataset, str) and dataset else [("task.dataset", NO_DATASET)]

    def __init__(self, difficulty: int | None = None, seed: int = 0, **options: Any) -> None:
        own = {k: v for k, v in options.items() if k in OWN_OPTIONS}
        super().__init__(difficulty, seed, **{k: v for k, v in own.items() if k != "dataset"})
        self.options = dict(options)
        factory = _factory()
        dataset = options.get("dataset")
        if not isinstance(dataset, str) or not dataset:
            raise AblateError(NO_DATASET)
        if dataset not in factory.DATASETS:
            guess = nearest(dataset, list(factory.DATASETS))
            raise AblateError(f"task 'reasoning_gym': reasoning-gym has no generator {dataset!r}"
                              + (f" (did you mean {guess!r}?)" if guess else "")
                              + f"; it has {len(factory.DATASETS)}, e.g. basic_arithmetic, leg_counting, chain_sum")
        _, config_cls = factory.DATASETS[dataset]
        fields = [f.name for f in dataclasses.fields(config_cls) if f.name not in SET_BY_ABLATE]
        config = {k: v for k, v in options.items() if k not in OWN_OPTIONS}
        for key in config:
            if key in SET_BY_ABLATE:
                raise AblateError(f"task 'reasoning_gym': option {key!r} is set by ablate (task.data_seed and the "
                                  "train/eval sizes); remove it")
            if key not in fields:
                guess = nearest(key, fields)
                raise AblateError(f"task 'reasoning_gym': generator {dataset!r} has no option {key!r}"
                                  + (f" (did you mean {guess!r}?)" if guess else "")
                                  + f"; its options: {', '.join(fields) or '(none)'}")
        try:
            self.generator = factory.create_dataset(dataset, seed=seed, size=1, **config)
        except (AssertionError, ValueError, TypeError) as exc:
            raise AblateError(f"task 'reasoning_gym': generator {dataset!r} refuses the options "
                              f"{config}: {exc}") from None
        self.dataset = dataset

    def draw(self, rng: random.Random) -> Problem:
        """One problem: the generator's item at a random index (items are a pure function of the
        generator's seed and the index)."""
        item = self.generator[rng.randrange(2**31)]
        answer = str(item["answer"])
        return Problem(prompt=str(item["question"]), answer=answer, solution=render_completion([], answer),
                       meta={"entry": item, "steps": []})

    def score(self, problem: Problem, answer: str | None) -> float:
        """The generator's score of ``answer`` in [0, 1] (0 for no answer or a scorer error)."""
        if answer is None:
            return 0.0
        try:
            value = float(self.generator.score_answer(answer, problem.meta["entry"]))
        except Exception:  # a scorer must never stop a trial: model output is arbitrary  # noqa: BLE001
            return 0.0
        return min(1.0, max(0.0, value)) if value == value else 0.0

    def grade(self, problem: Problem, completion: str) -> Grade:
        """The generator's scorer on the ``<answer>`` part; the format as for every task. Never raises."""
        parsed = parse_completion(completion)
        score = self.score(problem, parsed.answer)
        return Grade(
            answer_correct=score >= 1.0,
            parsed_answer=parsed.answer,
            format_ok=parsed.format_ok,
            format_errors=parsed.format_errors,
            steps=(),
            num_reference_steps=0,
            partial=score,
        )

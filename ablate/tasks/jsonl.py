"""``jsonl``: prompts and reference answers from a local JSON-lines file (GSM8K style).

Each non-blank line of the file is one JSON object with a prompt, a reference answer and, optionally,
reference steps and a reference completion. The task reads the whole file when it is built, so a
malformed line is reported at once, as ``FILE:LINE: what is wrong``.

A file of your own, in the completion format of :mod:`ablate.tasks.format` (the default)::

    {"question": "Tom has 3 bags of 4 apples and eats 2. How many are left?",
     "steps": ["3*4=12", "12-2=10"], "answer": "10"}

    task: jsonl
    task_options: {path: data/apples.jsonl}

GSM8K's own files, whose ``answer`` field holds the worked solution ending in ``#### 72``, with free
text completions graded on their last number::

    task_options: {path: gsm8k/train.jsonl, format: none, extract: last_number, solution_field: answer}

Options (``path`` is required):

- ``path``: the JSON-lines file.
- ``eval_path``: a second file for the eval split (records whose prompt is in it are dropped from the
  train split); without it, prompts are hashed into the eval split with ``eval_fraction``.
- ``eval_fraction``: fraction of the prompts in the eval split when there is no ``eval_path`` (0.1).
- ``prompt_field`` (``"question"``), ``answer_field`` (``"answer"``), ``steps_field`` (``"steps"``):
  the field names. The answer may be a string or a number. Steps are a list of strings or one string
  of lines (lines starting with ``####`` are left out); a record without the field has no steps.
- ``solution_field``: a field holding the reference completion (for warm starts); without it the
  reference completion is written from the steps and the answer in the task's format.
- ``reference_extract``: how the reference answer is read from the answer field: ``auto`` (the text
  after the last ``####`` if there is one, else the whole field; default), ``none`` (the whole field),
  ``last_number`` or ``regex:<pattern>``.
- ``extract``: how the final answer is read from a completion: ``answer_tags`` (the ``<answer>`` part,
  default), ``last_number`` (the last number in the completion, commas dropped) or ``regex:<pattern>``
  (the last match; its first group if the pattern has one).
- ``format``: ``tags`` (completions must follow the ``<think>...</think><answer>...</answer>`` format,
  whose think lines are the steps; default) or ``none`` (free text: no format check; the steps are
  the non-empty lines before the line that holds the answer).
- ``step_match``: ``last_number`` (a step is right when its last number equals the reference step's;
  steps without a number compare as text; default) or ``exact`` (the same text, whitespace collapsed).

Answers compare as numbers when both read as numbers (``$`` and ``,`` dropped), else as text with
whitespace collapsed. Partial credit: for integer answers the fraction of digits right, aligned from
the right; else 0. Every record's reference completion must grade as correct, else the line is
reported (e.g. a ``regex`` extraction that the written reference cannot satisfy needs
``solution_field``).
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any, ClassVar

from ablate.errors import AblateError
from ablate.tasks.base import TASKS, Grade, Problem, StepCheck
from ablate.tasks.common import OptionsTask, digit_partial, fraction_option, stable_unit
from ablate.tasks.format import ANSWER_CLOSE, ANSWER_OPEN, parse_completion, render_completion

_NUMBER_RE = re.compile(r"-?\d[\d,]*(?:\.\d+)?", re.ASCII)
_PLAIN_NUMBER_RE = re.compile(r"-?\d+(?:\.\d+)?", re.ASCII)
_INT_RE = re.compile(r"-?\d+", re.ASCII)

Span = tuple[int, int]


def last_number(text: str) -> tuple[str, Span] | None:
    """The last number in ``text`` (commas dropped, ``"1,234.5"`` → ``"1234.5"``) and its span."""
    found = None
    for m in _NUMBER_RE.finditer(text):
        found = m
    if found is None:
        return None
    raw = found.group().rstrip(",")
    return raw.replace(",", ""), (found.start(), found.start() + len(raw))


def _as_number(text: str) -> float | None:
    s = text.strip().replace(",", "").removeprefix("$").strip()
    return float(s) if _PLAIN_NUMBER_RE.fullmatch(s) else None


def answers_match(pred: str | None, ref: str) -> bool:
    """Numbers compare by value (``"1,000" == "1000.0"``); other answers as whitespace-collapsed text."""
    if pred is None:
        return False
    a, b = _as_number(pred), _as_number(ref)
    if a is not None and b is not None:
        return abs(a - b) <= 1e-9 * max(1.0, abs(b))
    return " ".join(pred.split()) == " ".join(ref.split())


def _numeric_partial(pred: str | None, ref: str) -> float:
    if pred is None:
        return 0.0
    p = pred.strip().replace(",", "").removeprefix("$")
    r = ref.strip().replace(",", "").removeprefix("$")
    if _INT_RE.fullmatch(p) and _INT_RE.fullmatch(r):
        return digit_partial(p, r)
    return 0.0


class Extraction:
    """A way to read a final answer from text: ``answer_tags``, ``last_number`` or ``regex:<pattern>``.

    Args:
        spec: the specification string.
        option: the option name, for error messages.
    """

    KINDS = ("answer_tags", "last_number", "regex:<pattern>")

    def __init__(self, spec: object, option: str, *, allow_raw: bool = False) -> None:
        self.spec = spec
        self.regex: re.Pattern[str] | None = None
        valid = ("auto", "none", *self.KINDS) if allow_raw else self.KINDS
        if not isinstance(spec, str):
            raise AblateError(f"task 'jsonl': option {option} must be one of {', '.join(valid)}; got {spec!r}")
        if spec.startswith("regex:"):
            try:
                self.regex = re.compile(spec[len("regex:"):])
            except re.error as exc:
                raise AblateError(f"task 'jsonl': option {option}: invalid regular expression ({exc})") from None
            self.kind = "regex"
        elif spec in valid:
            self.kind = spec
        else:
            raise AblateError(f"task 'jsonl': option {option} must be one of {', '.join(valid)}; got {spec!r}")

    def __call__(self, text: str) -> tuple[str, Span] | None:
        """The answer found in ``text`` and its span, or None. Never raises."""
        if self.kind == "answer_tags":
            parsed = parse_completion(text)
            if parsed.answer is None or parsed.answer_span is None:
                return None
            return parsed.answer, parsed.answer_span
        if self.kind == "last_number":
            return last_number(text)
        if self.kind == "regex":
            assert self.regex is not None
            found = None
            for m in self.regex.finditer(text):
                found = m
            if found is None:
                return None
            g = 1 if self.regex.groups else 0
            if found.group(g) is None:
                return None
            value = found.group(g).strip()
            return (value, found.span(g)) if value else None
        if self.kind == "auto" and "####" in text:
            i = text.rindex("####") + 4
            value = text[i:].strip()
            return (value, (i, len(text))) if value else None
        value = text.strip()
        return (value, (0, len(text))) if value else None


#: The message of a jsonl task without its file.
NO_PATH = "task 'jsonl' needs option path (the JSON-lines file with your prompts and answers)"


@TASKS.register("jsonl")
class JsonlTask(OptionsTask):
    """Your own data from a JSON-lines file; see the module docstring for the options and an example."""

    name: ClassVar[str] = "jsonl"
    description: ClassVar[str] = "your own prompts and answers (and steps) from a local JSON-lines file"
    DIFFICULTY: ClassVar[str] = "not used (the file decides)"
    OPTIONS: ClassVar[dict[str, str]] = {
        "path": "the JSON-lines file, one object per line (required)",
        "eval_path": "a separate JSON-lines file for the eval split (default: hash prompts into eval)",
        "eval_fraction": "fraction of prompts hashed into the eval split without eval_path (default 0.1)",
        "prompt_field": "field holding the prompt (default 'question')",
        "answer_field": "field holding the reference answer, a string or number (default 'answer')",
        "steps_field": "field holding the reference steps, a list of strings or lines (default 'steps')",
        "solution_field": "field holding the reference completion (default: written from steps and answer)",
        "reference_extract": "auto | none | last_number | regex:<pattern>: the reference answer from its field "
        "(default auto: after the last '####' if any)",
        "extract": "answer_tags | last_number | regex:<pattern>: the answer from a completion (default answer_tags)",
        "format": "tags | none: the <think>/<answer> format is required and checked, or free text (default tags)",
        "step_match": "last_number | exact: how a step is compared with the reference step (default last_number)",
    }

    @classmethod
    def option_problems(cls, options: dict[str, Any]) -> list[tuple[str, str]]:
        """Unknown option names, and a missing ``path`` (whether the file exists is checked where it runs)."""
        problems = super().option_problems(options)
        if "path" not in options:
            problems.append(("task.options", NO_PATH))
        return problems

    def __init__(self, difficulty: int | None = None, seed: int = 0, **options: Any) -> None:
        super().__init__(difficulty, seed, **options)
        if "path" not in options:
            raise AblateError(NO_PATH)
        self.prompt_field = self._str_option("prompt_field", "question")
        self.answer_field = self._str_option("answer_field", "answer")
        self.steps_field = self._str_option("steps_field", "steps")
        self.solution_field = self._str_option("solution_field", None)
        self.reference_extract = Extraction(options.get("reference_extract", "auto"), "reference_extract",
                                            allow_raw=True)
        self.extract = Extraction(options.get("extract", "answer_tags"), "extract")
        self.format = self._choice_option("format", "tags", ("tags", "none"))
        self.step_match = self._choice_option("step_match", "last_number", ("last_number", "exact"))
        self.eval_fraction = fraction_option(self.name, "eval_fraction", options.get("eval_fraction", 0.1))
        self.path = Path(self._str_option("path", None) or "")
        train = self.load(self.path)
        if options.get("eval_path") is not None:
            self.eval_path: Path | None = Path(self._str_option("eval_path", None) or "")
            evals = self.load(self.eval_path)
            held = {p.prompt for p in evals}
            self.records = {"train": [p for p in train if p.prompt not in held], "eval": evals}
        else:
            self.eval_path = None
            self.records = {"train": [], "eval": []}
            for p in train:
                self.records[self.split_of(p.prompt)].append(p)

    def _str_option(self, key: str, default: str | None) -> str | None:
        value = self.options.get(key, default)
        if value is not None and (not isinstance(value, str) or not value):
            raise AblateError(f"task 'jsonl': option {key} must be a non-empty string, got {value!r}")
        return value

    def _choice_option(self, key: str, default: str, choices: tuple[str, ...]) -> str:
        value = self.options.get(key, default)
        if value not in choices:
            raise AblateError(f"task 'jsonl': option {key} must be one of {', '.join(choices)}; got {value!r}")
        return value

    def split_of(self, prompt: str) -> str:
        """The split of a prompt when there is no ``eval_path``."""
        return "eval" if stable_unit(self.name, self.seed, prompt) < self.eval_fraction else "train"

    # --- loading ----------------------------------------------------------------------------------

    def load(self, path: Path) -> list[Problem]:
        """Read and check every record of ``path``; a malformed line is an AblateError ``FILE:LINE: ...``."""
        if not path.is_file():
            raise AblateError(f"task 'jsonl': file {str(path)!r} not found (option path / eval_path)")
        out: list[Problem] = []
        with path.open("rb") as fh:
            for lineno, raw in enumerate(fh, start=1):
                where = f"{path}:{lineno}"
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise AblateError(f"{where}: not valid UTF-8; save the file as UTF-8") from None
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise AblateError(
                        f"{where}: not valid JSON ({exc.msg} at column {exc.colno}); "
                        "each line must be one JSON object"
                    ) from None
                out.append(self.problem_from(record, where))
        if not out:
            raise AblateError(f"task 'jsonl': file {str(path)!r} has no records")
        return out

    def problem_from(self, record: Any, where: str) -> Problem:
        """The problem of one record; ``where`` ("FILE:LINE") prefixes every error message."""
        if not isinstance(record, dict):
            raise AblateError(f"{where}: expected a JSON object, got {type(record).__name__}")
        fields = ", ".join(record) or "(none)"
        prompt = record.get(self.prompt_field)
        if not isinstance(prompt, str) or not prompt:
            what = "missing" if self.prompt_field not in record else f"not a non-empty string ({prompt!r})"
            raise AblateError(
                f"{where}: prompt field {self.prompt_field!r} is {what}; the line has fields: {fields} "
                "(set option prompt_field)"
            )
        raw = record.get(self.answer_field)
        if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
            what = "missing" if self.answer_field not in record else f"not a string or number ({raw!r})"
            raise AblateError(
                f"{where}: answer field {self.answer_field!r} is {what}; the line has fields: {fields} "
                "(set option answer_field)"
            )
        found = self.reference_extract(str(raw))
        if found is None:
            raise AblateError(
                f"{where}: no reference answer in field {self.answer_field!r} ({str(raw)[:60]!r}) with "
                f"reference_extract={self.reference_extract.spec!r}"
            )
        answer = found[0]
        steps_raw = record.get(self.steps_field)
        if steps_raw is None:
            steps: list[str] = []
        elif isinstance(steps_raw, str):
            steps = [s.strip() for s in steps_raw.split("\n") if s.strip() and not s.strip().startswith("####")]
        elif isinstance(steps_raw, list) and all(isinstance(s, str) for s in steps_raw):
            steps = [s.strip() for s in steps_raw if s.strip()]
        else:
            raise AblateError(
                f"{where}: steps field {self.steps_field!r} must be a list of strings or a string, "
                f"got {steps_raw!r:.60}"
            )
        if any("\n" in s for s in steps):
            raise AblateError(f"{where}: a step in field {self.steps_field!r} spans several lines")
        if self.solution_field is not None:
            solution = record.get(self.solution_field)
            if not isinstance(solution, str) or not solution:
                raise AblateError(
                    f"{where}: solution field {self.solution_field!r} is missing or not a non-empty string; "
                    f"the line has fields: {fields}"
                )
        elif self.format == "tags":
            solution = render_completion(steps, answer)
        else:
            last = f"{ANSWER_OPEN}{answer}{ANSWER_CLOSE}" if self.extract.kind == "answer_tags" else answer
            solution = "\n".join([*steps, last])
        problem = Problem(prompt=prompt, answer=answer, solution=solution, meta={"steps": steps, "where": where})
        if not self.grade(problem, solution).answer_correct:
            raise AblateError(
                f"{where}: the reference completion {solution[:80]!r} does not give the answer {answer!r} "
                f"with extract={self.extract.spec!r}; give solution_field or change extract"
            )
        return problem

    # --- sampling and grading ---------------------------------------------------------------------

    def sample(self, split: str, n: int, *, seed: int) -> list[Problem]:
        """``n`` records of ``split``, distinct while the split has enough, in seeded order.

        Raises:
            AblateError: an unknown split, or an empty one.
        """
        self.check_split(split, n)
        pool = self.records[split]
        if not pool and n:
            how = f"eval_path {str(self.eval_path)!r}" if self.eval_path else f"eval_fraction={self.eval_fraction}"
            raise AblateError(
                f"task 'jsonl': {str(self.path)!r} has no {split} records ({how}); add records, "
                "change eval_fraction or give eval_path"
            )
        rng = random.Random(f"jsonl|{self.seed}|{split}|{seed}")
        out: list[Problem] = []
        while len(out) < n:  # one shuffled pass over the split after another: a smaller n is a prefix
            order = list(pool)
            rng.shuffle(order)
            out.extend(order[: n - len(out)])
        return out

    def _step_ok(self, text: str, ref: str) -> bool:
        if self.step_match == "last_number":
            want = last_number(ref)
            if want is not None:
                got = last_number(text)
                return got is not None and answers_match(got[0], want[0])
        return " ".join(text.split()) == " ".join(ref.split())

    def grade(self, problem: Problem, completion: str) -> Grade:
        """Grade a completion by the configured extraction, format and step matching. Never raises."""
        found = self.extract(completion)
        answer, span = (found[0], found[1]) if found else (None, None)
        if self.format == "tags":
            parsed = parse_completion(completion)
            steps = list(parsed.steps)
            errors = parsed.format_errors
        else:
            end = completion.rfind("\n", 0, span[0]) + 1 if span else len(completion)
            steps = []
            pos = 0
            for line in completion[:end].split("\n"):
                stripped = line.strip()
                if stripped:
                    s = pos + len(line) - len(line.lstrip())
                    steps.append((stripped, (s, s + len(stripped))))
                pos += len(line) + 1
            errors = ()
        ref = problem.meta.get("steps", [])
        checks = tuple(
            StepCheck(sp, i < len(ref) and self._step_ok(text, ref[i])) for i, (text, sp) in enumerate(steps)
        )
        correct = answers_match(answer, problem.answer)
        return Grade(
            answer_correct=correct,
            parsed_answer=answer,
            format_ok=not errors,
            format_errors=tuple(errors),
            steps=checks,
            num_reference_steps=len(ref),
            partial=1.0 if correct else _numeric_partial(answer, problem.answer),
        )

"""``countdown``: reach a target by combining every given number once — many solutions, one verifier.

Unlike the arithmetic tasks, a problem has many correct solutions, so steps and answer are checked by
a verifier rather than compared with the reference. Prompt ``"3,7,5:26"`` (numbers, colon, target);
the reference completion combines two available numbers per step, then gives the expression::

    <think>7*3=21\\n21+5=26</think><answer>7*3+5</answer>

Rules (the same for steps and answer): every intermediate result is a non-negative integer
(subtraction ``a-b`` needs ``a >= b``, division must be exact), and every given number is used exactly
once, so a solution has ``difficulty - 1`` steps.

- A step ``a op b=c`` is correct when ``a`` and ``b`` are available (given numbers and earlier results
  not used yet), ``c`` is the true result, and the target can still be reached from the numbers left.
  A legal step makes its true result available (whatever ``c`` it wrote), so one wrong result does not
  make the later steps wrong; a step after a dead end is wrong.
- The answer is an expression with ``+ - * /`` and parentheses (usual precedence); it is correct when it
  uses the given numbers exactly once each and evaluates, under the rules above, to the target.
- Partial credit for a wrong answer: ``(numbers used / numbers given) * max(0, 1 - |value - target| /
  target)`` when the expression is valid and uses only given numbers (each at most once), else 0.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from functools import lru_cache
from typing import Any, ClassVar

from ablate.errors import AblateError
from ablate.tasks.arithmetic import apply_op
from ablate.tasks.base import TASKS, Problem
from ablate.tasks.common import GeneratedTask, int_option
from ablate.tasks.format import render_completion

_STEP_RE = re.compile(r"(0|[1-9]\d{0,8})([-+*/])(0|[1-9]\d{0,8})=(0|[1-9]\d{0,12})", re.ASCII)
_EXPR_TOKEN_RE = re.compile(r"\s*(?:(\d+)|(.))", re.ASCII)
_PREC = {"+": 1, "-": 1, "*": 2, "/": 2}


@lru_cache(maxsize=65536)
def reachable(numbers: tuple[int, ...], target: int) -> bool:
    """Whether combining all of ``numbers`` (sorted tuple) under the rules can give ``target``."""
    if len(numbers) == 1:
        return numbers[0] == target
    n = len(numbers)
    for i in range(n):
        for j in range(n):
            if i == j or (i > j and numbers[i] == numbers[j]):
                continue
            rest = [numbers[k] for k in range(n) if k != i and k != j]
            for op in "+-*/":
                if op in "+*" and i > j:
                    continue  # commutative: one order is enough
                r = apply_op(numbers[i], op, numbers[j])
                if r is not None and reachable(tuple(sorted([*rest, r])), target):
                    return True
    return False


def evaluate_expression(text: str) -> tuple[int, list[int]] | None:
    """Value and numbers of an expression with ``+ - * /``, parentheses and non-negative integers.

    Every intermediate result must be a non-negative integer (exact division). Returns None for
    anything else (syntax error, unary minus, negative or fractional intermediate, too long). Never
    raises.
    """
    text = text.strip()
    if len(text) > 200:
        return None
    tokens: list[str] = []
    pos = 0
    while pos < len(text):
        m = _EXPR_TOKEN_RE.match(text, pos)
        if m is None:
            return None
        tok = m.group(1) or m.group(2)
        if m.group(2) is not None and tok not in "+-*/()":
            return None
        tokens.append(tok)
        pos = m.end()
    used: list[int] = []
    i = 0

    def atom(depth: int) -> int | None:
        nonlocal i
        if i >= len(tokens) or depth > 50:
            return None
        tok = tokens[i]
        if tok == "(":
            i += 1
            v = expr(depth + 1)
            if v is None or i >= len(tokens) or tokens[i] != ")":
                return None
            i += 1
            return v
        if tok.isascii() and tok.isdigit():
            if len(tok) > 1 and tok[0] == "0":
                return None
            i += 1
            used.append(int(tok))
            return int(tok)
        return None

    def binary(depth: int, level: int) -> int | None:
        nonlocal i
        sub = (lambda: atom(depth)) if level == 2 else (lambda: binary(depth, 2))
        v = sub()
        while v is not None and i < len(tokens) and _PREC.get(tokens[i]) == level:
            op = tokens[i]
            i += 1
            w = sub()
            if w is None:
                return None
            v = apply_op(v, op, w)
        return v

    def expr(depth: int) -> int | None:
        return binary(depth, 1)

    value = expr(0)
    if value is None or i != len(tokens):
        return None
    return value, used


def solve(numbers: list[int], target: int) -> tuple[list[str], str] | None:
    """One solution (steps ``a op b=c`` and the expression) combining all ``numbers`` into ``target``.

    None when there is none. Depth-first over pairs and operators, pruned with :func:`reachable`.
    """
    pool: list[tuple[int, str, int]] = [(x, str(x), 3) for x in numbers]
    steps: list[str] = []

    def rec(pool: list[tuple[int, str, int]]) -> str | None:
        if len(pool) == 1:
            return pool[0][1] if pool[0][0] == target else None
        for i in range(len(pool)):
            for j in range(len(pool)):
                if i == j:
                    continue
                (a, ea, pa), (b, eb, pb) = pool[i], pool[j]
                for op in "+-*/":
                    c = apply_op(a, op, b)
                    if c is None:
                        continue
                    rest = [p for k, p in enumerate(pool) if k not in (i, j)]
                    if not reachable(tuple(sorted([*(p[0] for p in rest), c])), target):
                        continue
                    steps.append(f"{a}{op}{b}={c}")
                    found = rec([*rest, (c, _combine(ea, pa, op, eb, pb), _PREC[op])])
                    if found is not None:
                        return found
                    steps.pop()
        return None

    expression = rec(pool)
    return None if expression is None else (list(steps), expression)


def _combine(ea: str, pa: int, op: str, eb: str, pb: int) -> str:
    """``ea op eb`` with the parentheses that precedence and left-to-right evaluation need."""
    prec = _PREC[op]
    left = f"({ea})" if pa < prec else ea
    right = f"({eb})" if pb < prec or (pb == prec and op in "-/") else eb
    return left + op + right


@TASKS.register("countdown")
class CountdownTask(GeneratedTask):
    """Reach the target by combining every given number once; see the module docstring for the rules."""

    name: ClassVar[str] = "countdown"
    description: ClassVar[str] = "reach the target by combining every given number once with + - * /"
    DIFFICULTY: ClassVar[str] = "how many numbers are given, 2-5 (default 3)"
    default_difficulty: ClassVar[int | None] = 3
    min_difficulty: ClassVar[int] = 2
    max_difficulty: ClassVar[int] = 5
    OPTIONS: ClassVar[dict[str, str]] = {
        **GeneratedTask.OPTIONS,
        "max_number": "largest given number, 2-99 (default 9)",
        "max_target": "largest target, 2-9999 (default 99)",
    }

    def __init__(self, difficulty: int | None = None, seed: int = 0, **options: Any) -> None:
        super().__init__(difficulty, seed, **options)
        self.max_number = int_option(self.name, "max_number", options.get("max_number", 9), 2, 99)
        self.max_target = int_option(self.name, "max_target", options.get("max_target", 99), 2, 9999)

    def draw(self, rng: random.Random) -> Problem:
        """Random numbers combined at random (legal operations only); the result is the target."""
        for _ in range(10_000):
            numbers = [rng.randint(1, self.max_number) for _ in range(self.difficulty)]
            pool: list[tuple[int, str, int]] = [(x, str(x), 3) for x in numbers]  # value, expr, precedence
            steps: list[str] = []
            while len(pool) > 1:
                i, j = rng.sample(range(len(pool)), 2)
                (a, ea, pa), (b, eb, pb) = pool[i], pool[j]
                ops = [op for op in "+-*/" if (r := apply_op(a, op, b)) is not None and r > 0
                       and not (op in "*/" and b == 1) and not (op == "*" and a == 1)]
                op = rng.choice(ops)  # never empty: a + b > 0
                c = a + b if op == "+" else apply_op(a, op, b)
                assert c is not None
                steps.append(f"{a}{op}{b}={c}")
                pool = [p for k, p in enumerate(pool) if k not in (i, j)]
                pool.append((c, _combine(ea, pa, op, eb, pb), _PREC[op]))
            target, expression, _ = pool[0]
            if 1 <= target <= self.max_target and target not in numbers:
                return self._problem(numbers, target, steps, expression)
        raise AblateError(
            f"countdown: no problem found with max_number={self.max_number}, max_target={self.max_target}"
            f" at difficulty {self.difficulty}; raise max_target"
        )

    def make(self, numbers: list[int], target: int) -> Problem:
        """The problem "reach ``target`` from ``numbers``" (1-5 numbers), with a solution from :func:`solve`."""
        found = solve(list(numbers), target) if 1 <= len(numbers) <= 5 else None
        if found is None:
            raise AblateError(f"countdown: {target} cannot be reached from {numbers} under the rules")
        return self._problem(list(numbers), target, *found)

    @staticmethod
    def _problem(numbers: list[int], target: int, steps: list[str], expression: str) -> Problem:
        return Problem(
            prompt=",".join(map(str, numbers)) + f":{target}",
            answer=expression,
            solution=render_completion(steps, expression),
            meta={"numbers": numbers, "target": target, "steps": steps},
        )

    def check_steps(self, problem: Problem, steps: list[str]) -> list[bool]:
        """Per step: legal on the numbers available, true result, target still reachable."""
        target = int(problem.meta["target"])
        state = Counter(int(x) for x in problem.meta["numbers"])
        flags: list[bool] = []
        for text in steps:
            m = _STEP_RE.fullmatch(text)
            if m is None:
                flags.append(False)
                continue
            a, op, b, c = int(m.group(1)), m.group(2), int(m.group(3)), int(m.group(4))
            need = Counter([a, b])
            r = apply_op(a, op, b)
            if r is None or any(state[k] < v for k, v in need.items()):
                flags.append(False)
                continue
            state = state - need + Counter([r])
            flags.append(c == r and reachable(tuple(sorted(state.elements())), target))
        return flags

    def check_answer(self, problem: Problem, answer: str | None) -> bool:
        """The expression uses every given number once and evaluates to the target."""
        if answer is None:
            return False
        ev = evaluate_expression(answer)
        return (
            ev is not None
            and ev[0] == int(problem.meta["target"])
            and Counter(ev[1]) == Counter(int(x) for x in problem.meta["numbers"])
        )

    def partial_credit(self, problem: Problem, answer: str | None) -> float:
        """Numbers used over numbers given, times closeness to the target (0 for invalid answers)."""
        ev = None if answer is None else evaluate_expression(answer)
        if ev is None:
            return 0.0
        value, used = ev
        given = Counter(int(x) for x in problem.meta["numbers"])
        if Counter(used) - given:  # a number that is not given, or used too often
            return 0.0
        target = int(problem.meta["target"])
        return len(used) / sum(given.values()) * max(0.0, 1.0 - abs(value - target) / target)

"""Arithmetic tasks with one checkable step per column or per operation: ``addition``, ``chain``.

Both use the completion format of :mod:`ablate.tasks.format`. A step is correct when it is exactly the
reference step at its position: the step is judged against the true state of the computation (the
true carry, the true running value), so one wrong step does not make the later ones wrong.
"""

from __future__ import annotations

import random
from typing import Any, ClassVar

from ablate.errors import AblateError
from ablate.tasks.base import TASKS, Problem
from ablate.tasks.common import GeneratedTask, int_option, stable_unit
from ablate.tasks.format import render_completion


@TASKS.register("addition")
class AdditionTask(GeneratedTask):
    """Multi-digit addition, one step per column from the right with its carry.

    Prompt ``"357+486="``; the reference completion, one step ``a+b+carry=sum`` per column from the
    right (the carry into the column, the column's sum; the next carry is its tens digit), then the
    sum::

        <think>7+6+0=13\\n5+8+1=14\\n3+4+1=8</think><answer>843</answer>

    Both operands have exactly ``difficulty`` digits (0-9 for one digit), so there are ``difficulty``
    steps; 3 digits take 30-35 tokens with the tags as single tokens. Partial credit: the fraction of
    answer digits right, aligned from the right.

    Option ``checks`` (0-3, default 0) makes the response length the policy's free choice: after its
    column steps a completion may verify the sum with up to ``checks`` optional lines, in this order
    ``sum-b=a``, ``sum-a=b``, ``a+b=sum`` (``843-486=357``, ...). Each reference solution carries
    0..``checks`` of them, the count fixed by a hash of the prompt (uniform over the counts), so a
    warm start learns to write any of them and nothing in the prompt says how many. A check line is a
    step, correct when it is the allowed line at its position; the answer and its reward do not
    depend on the checks, and the required steps (``num_reference_steps``) are the columns alone. At
    2 digits a check line adds 8-9 tokens to a ~23-token solution.
    """

    name: ClassVar[str] = "addition"
    description: ClassVar[str] = "add two n-digit numbers, one step per column (digits, carry, column sum)"
    DIFFICULTY: ClassVar[str] = "digits per operand, 1-20 (default 3)"
    default_difficulty: ClassVar[int | None] = 3
    min_difficulty: ClassVar[int] = 1
    max_difficulty: ClassVar[int] = 20
    OPTIONS: ClassVar[dict[str, str]] = {
        **GeneratedTask.OPTIONS,
        "checks": "most optional verification lines after the column steps, 0-3 (default 0): length becomes a free choice",
    }

    def __init__(self, difficulty: int | None = None, seed: int = 0, **options: Any) -> None:
        super().__init__(difficulty, seed, **options)
        self.checks = int_option(self.name, "checks", options.get("checks", 0), 0, 3)

    def make(self, a: int, b: int) -> Problem:
        """The problem ``a + b`` (operands of at most ``difficulty`` digits; columns zero-padded)."""
        d = self.difficulty
        if a < 0 or b < 0 or max(a, b) >= 10**d:
            raise AblateError(f"addition at difficulty {d} takes operands in [0, {10**d - 1}], got {a}, {b}")
        da, db = str(a).zfill(d), str(b).zfill(d)
        steps: list[str] = []
        carry = 0
        for i in range(d - 1, -1, -1):
            x, y = int(da[i]), int(db[i])
            s = x + y + carry
            steps.append(f"{x}+{y}+{carry}={s}")
            carry = s // 10
        answer = str(a + b)
        prompt = f"{a}+{b}="
        if not self.checks:
            return Problem(prompt=prompt, answer=answer, solution=render_completion(steps, answer),
                           meta={"a": a, "b": b, "steps": steps})
        allowed = [f"{a + b}-{b}={a}", f"{a + b}-{a}={b}", f"{a}+{b}={a + b}"][: self.checks]
        used = min(self.checks, int(stable_unit("addition-checks", prompt) * (self.checks + 1)))
        return Problem(
            prompt=prompt,
            answer=answer,
            solution=render_completion(steps + allowed[:used], answer),
            meta={"a": a, "b": b, "steps": steps, "checks": allowed},
        )

    def check_steps(self, problem: Problem, steps: list[str]) -> list[bool]:
        """The column steps against the reference by position, then each further step against the
        allowed check line at its position (:attr:`checks` of them)."""
        ref = list(problem.meta.get("steps", [])) + list(problem.meta.get("checks", []))
        return [i < len(ref) and s == ref[i] for i, s in enumerate(steps)]

    def draw(self, rng: random.Random) -> Problem:
        """Two uniform operands of exactly ``difficulty`` digits."""
        d = self.difficulty
        lo, hi = (0 if d == 1 else 10 ** (d - 1)), 10**d - 1
        return self.make(rng.randint(lo, hi), rng.randint(lo, hi))


_OPS = "+-*/"


def apply_op(x: int, op: str, y: int) -> int | None:
    """``x op y`` when it is a non-negative integer (exact division, no division by 0), else None."""
    if op == "+":
        return x + y
    if op == "-":
        return x - y if x >= y else None
    if op == "*":
        return x * y
    if op == "/":
        return x // y if y != 0 and x % y == 0 else None
    return None


@TASKS.register("chain")
class ChainTask(GeneratedTask):
    """An arithmetic chain evaluated left to right (no operator precedence), one step per operation.

    Prompt ``"3+4*2-5="`` means ``((3+4)*2)-5``; the reference completion, one step
    ``value op operand=result`` per operation, then the result::

        <think>3+4=7\\n7*2=14\\n14-5=9</think><answer>9</answer>

    ``difficulty`` operations; operands are 1..``max_operand`` (``*`` and ``/`` use 2..``max_operand``)
    and every running value stays an integer in [0, ``max_value``] (exact division only). Partial
    credit: the fraction of answer digits right, aligned from the right.
    """

    name: ClassVar[str] = "chain"
    description: ClassVar[str] = "evaluate a chain like 3+4*2-5 left to right, one step per operation"
    DIFFICULTY: ClassVar[str] = "number of operations, 1-12 (default 3)"
    default_difficulty: ClassVar[int | None] = 3
    min_difficulty: ClassVar[int] = 1
    max_difficulty: ClassVar[int] = 12
    OPTIONS: ClassVar[dict[str, str]] = {
        **GeneratedTask.OPTIONS,
        "max_operand": "largest operand and first number, 2-99 (default 9)",
        "max_value": "largest running value, >= max_operand, <= 9999 (default 99)",
        "ops": "the operators to use, a non-empty subset of '+-*/' (default '+-*')",
    }

    def __init__(self, difficulty: int | None = None, seed: int = 0, **options: Any) -> None:
        super().__init__(difficulty, seed, **options)
        self.max_operand = int_option(self.name, "max_operand", options.get("max_operand", 9), 2, 99)
        self.max_value = int_option(self.name, "max_value", options.get("max_value", 99), self.max_operand, 9999)
        ops = options.get("ops", "+-*")
        if not isinstance(ops, str) or not ops or any(c not in _OPS for c in ops):
            raise AblateError(f"task 'chain': option ops must be a non-empty subset of '{_OPS}', got {ops!r}")
        self.ops = "".join(c for c in _OPS if c in ops)

    def make(self, start: int, terms: list[tuple[str, int]]) -> Problem:
        """The problem ``start op1 n1 op2 n2 ...`` (left to right); every value must stay valid."""
        steps: list[str] = []
        v = start
        for op, y in terms:
            r = apply_op(v, op, y)
            if r is None:
                raise AblateError(f"chain: {v}{op}{y} is not a non-negative integer")
            steps.append(f"{v}{op}{y}={r}")
            v = r
        answer = str(v)
        return Problem(
            prompt=str(start) + "".join(f"{op}{y}" for op, y in terms) + "=",
            answer=answer,
            solution=render_completion(steps, answer),
            meta={"start": start, "terms": [list(t) for t in terms], "steps": steps},
        )

    def _choices(self, v: int, op: str) -> list[int]:
        lo = 1 if op in "+-" else 2
        return [y for y in range(lo, self.max_operand + 1) if (r := apply_op(v, op, y)) is not None
                and r <= self.max_value]

    def draw(self, rng: random.Random) -> Problem:
        """A random start, then per operation a uniform operator among those with a valid operand."""
        for _ in range(1000):
            v = start = rng.randint(1, self.max_operand)
            terms: list[tuple[str, int]] = []
            for _ in range(self.difficulty):
                options = [(op, ys) for op in self.ops if (ys := self._choices(v, op))]
                if not options:
                    break
                op, ys = rng.choice(options)
                y = rng.choice(ys)
                terms.append((op, y))
                v = apply_op(v, op, y)  # type: ignore[assignment]
            if len(terms) == self.difficulty:
                return self.make(start, terms)
        raise AblateError(
            f"chain: cannot build {self.difficulty} operations with ops={self.ops!r}, "
            f"max_operand={self.max_operand}, max_value={self.max_value}; raise max_value or add operators"
        )

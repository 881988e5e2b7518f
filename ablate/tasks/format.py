"""The completion format of the built-in tasks, and a parser that never raises.

A reference completion is written as reasoning steps, then the final answer::

    <think>STEP\\nSTEP\\n...STEP</think><answer>ANSWER</answer>

- the four tags are written exactly so, with nothing before ``<think>``, nothing between ``</think>``
  and ``<answer>`` and nothing after ``</answer>`` (the end-of-sequence token follows);
- steps are separated by one ``"\\n"``; a step is a non-empty line of printable ASCII without leading
  or trailing spaces and without a tag; ``<think></think>`` (no steps) is well formed;
- the answer is one non-empty line of the same kind.

For example (addition, 357 + 486)::

    <think>7+6+0=13\\n5+8+1=14\\n3+4+1=8</think><answer>843</answer>

:func:`parse_completion` reads any string two ways at once:

- *strictly*, for the format check: it reports the character spans where the format breaks (a
  missing tag is reported on the character or tag that came in its place; an extra tag, stray text
  or a blank line on itself), so that a format penalty can be placed on those tokens;
- *leniently*, for the answer and step checks: the tags are aligned with the expected order
  ``<think> </think> <answer> </answer>`` (a longest common subsequence, earliest match first),
  a missing tag is inferred from its neighbours, and extra tags separate steps. So a broken tag
  fails the format check only, not the answer or step checks.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
ANSWER_OPEN = "<answer>"
ANSWER_CLOSE = "</answer>"
#: The format tags, in the order a completion uses them.
FORMAT_TAGS = (THINK_OPEN, THINK_CLOSE, ANSWER_OPEN, ANSWER_CLOSE)

_TAG_RE = re.compile("|".join(re.escape(t) for t in FORMAT_TAGS))
_BAD_CHARS_RE = re.compile(r"[^\x20-\x7e\n]+")
_NO_TAG = "(?!" + "|".join(re.escape(t) for t in FORMAT_TAGS) + ")"
_LINE = rf"(?! )(?:{_NO_TAG}[\x20-\x7e])+(?<! )"
#: The whole well-formed completion as one regular expression (``fullmatch`` it).
#: ``parse_completion(s).format_ok == bool(FORMAT_RE.fullmatch(s))`` for every string ``s``.
FORMAT_RE = re.compile(
    rf"{re.escape(THINK_OPEN)}(?:{_LINE}(?:\n{_LINE})*)?{re.escape(THINK_CLOSE)}"
    rf"{re.escape(ANSWER_OPEN)}{_LINE}{re.escape(ANSWER_CLOSE)}"
)

Span = tuple[int, int]


def render_completion(steps: Sequence[str], answer: str) -> str:
    """The completion with ``steps`` (one per line) and ``answer``, in the format above."""
    body = "\n".join(steps)
    return f"{THINK_OPEN}{body}{THINK_CLOSE}{ANSWER_OPEN}{answer}{ANSWER_CLOSE}"


@dataclass(frozen=True)
class ParsedCompletion:
    """What :func:`parse_completion` found in a completion.

    Attributes:
        steps: each step found (leniently) in the think part, in order: its text (stripped) and its
            character span ``[start, end)`` in the completion.
        answer: the text of the answer part (stripped, extra tags removed), None when there is none.
        answer_span: the span of ``answer`` in the completion, None when there is none.
        format_errors: merged, sorted character spans where the format breaks; empty when the
            completion is well formed. Each span is non-empty unless the completion is empty, which
            is reported as ``(0, 0)``.
        think_span: the span of the think part (lenient), whose lines are the steps.
    """

    steps: tuple[tuple[str, Span], ...]
    answer: str | None
    answer_span: Span | None
    format_errors: tuple[Span, ...]
    think_span: Span

    @property
    def format_ok(self) -> bool:
        """The completion follows the format exactly."""
        return not self.format_errors


def _align(kinds: list[int]) -> tuple[list[int | None], list[int]]:
    """Align tag kinds (0..3 for FORMAT_TAGS) with the expected order 0, 1, 2, 3.

    Returns, for each expected tag, the index of the tag occurrence matched to it (None when
    missing), and the indices of the extra occurrences. A longest common subsequence, preferring
    the earliest occurrences.
    """
    m = len(kinds)
    # dp[i][k]: most matches between kinds[i:] and expected tags k..3
    dp = [[0] * 5 for _ in range(m + 1)]
    for i in range(m - 1, -1, -1):
        for k in range(3, -1, -1):
            best = max(dp[i + 1][k], dp[i][k + 1])
            if kinds[i] == k:
                best = max(best, 1 + dp[i + 1][k + 1])
            dp[i][k] = best
    matched: list[int | None] = [None] * 4
    extras: list[int] = []
    i = k = 0
    while i < m and k < 4:
        if kinds[i] == k and dp[i][k] == 1 + dp[i + 1][k + 1]:
            matched[k] = i
            i += 1
            k += 1
        elif dp[i + 1][k] == dp[i][k]:
            extras.append(i)
            i += 1
        else:
            k += 1
    extras.extend(range(i, m))
    return matched, extras


def _pieces(lo: int, hi: int, cuts: Sequence[Span]) -> list[Span]:
    """``[lo, hi)`` minus the (sorted, disjoint) ``cuts``, as a list of non-empty intervals."""
    out: list[Span] = []
    pos = lo
    for s, e in cuts:
        if e <= pos or s >= hi:
            continue
        if s > pos:
            out.append((pos, s))
        pos = max(pos, e)
    if pos < hi:
        out.append((pos, hi))
    return out


def _merge(spans: list[Span]) -> tuple[Span, ...]:
    """Sort and merge overlapping spans."""
    out: list[list[int]] = []
    for s, e in sorted(spans):
        if out and s < out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        elif out and s == out[-1][1] and s == e:
            continue
        else:
            out.append([s, e])
    return tuple((s, e) for s, e in out)


def _strip_span(text: str, s: int, e: int) -> Span:
    """The span ``[s, e)`` without leading and trailing whitespace (empty span when all blank)."""
    seg = text[s:e]
    left = len(seg) - len(seg.lstrip())
    if left == len(seg):
        return (s, s)
    right = len(seg) - len(seg.rstrip())
    return (s + left, e - right)


@dataclass(frozen=True)
class _Tags:
    """The format tags found in a completion: ``found`` every tag as ``(kind, start, end)``; ``anchors``
    the four tags aligned to FORMAT_TAGS (None where missing); ``extras`` the spans of tags left over."""

    text: str
    found: list[tuple[int, int, int]]
    anchors: list[Span | None]
    extras: list[Span]

    @staticmethod
    def of(text: str) -> _Tags:
        """Find and align the tags of ``text``."""
        found = [(FORMAT_TAGS.index(m.group()), m.start(), m.end()) for m in _TAG_RE.finditer(text)]
        matched, extra_idx = _align([k for k, _, _ in found])
        anchors: list[Span | None] = [None if j is None else found[j][1:] for j in matched]
        return _Tags(text, found, anchors, [found[j][1:] for j in extra_idx])

    def last_char(self) -> Span:
        """The span of the last character ((0, 0) for an empty text)."""
        n = len(self.text)
        return (n - 1, n) if n else (0, 0)

    def token_at(self, p: int) -> Span:
        """The tag starting at ``p``, else the character at ``p``, else the last character."""
        for _, s, e in self.found:
            if s == p:
                return (s, e)
        return (p, p + 1) if p < len(self.text) else self.last_char()

    def next_anchor(self, after: int) -> Span | None:
        """The first aligned tag starting at or after ``after``, or None."""
        return next((a for a in self.anchors if a is not None and a[0] >= after), None)


def _regions(tags: _Tags) -> tuple[int, int, int | None, int]:
    """The lenient regions ``(think_start, think_end, ans_lo, ans_hi)``; ``ans_lo`` None: no answer region."""
    a0, a1, a2, a3 = tags.anchors
    think_start = a0[1] if a0 else 0
    if a1:
        think_end = a1[0]
    else:
        nxt = tags.next_anchor(think_start)
        think_end = nxt[0] if nxt else len(tags.text)
    if a2:
        ans_lo: int | None = a2[1]
    elif a1:
        ans_lo = a1[1]
    else:
        ans_lo = None
    ans_hi = a3[0] if a3 else len(tags.text)
    return think_start, think_end, ans_lo, ans_hi


def _steps(tags: _Tags, think_start: int, think_end: int) -> list[tuple[str, Span]]:
    """Steps: the non-blank lines of the think part (stripped), extra tags acting as separators."""
    text = tags.text
    steps: list[tuple[str, Span]] = []
    for lo, hi in _pieces(think_start, think_end, tags.extras):
        pos = lo
        for line in text[lo:hi].split("\n"):
            s, e = _strip_span(text, pos, pos + len(line))
            if e > s:
                steps.append((text[s:e], (s, e)))
            pos += len(line) + 1
    return steps


def _answer(tags: _Tags, ans_lo: int | None, ans_hi: int) -> tuple[str | None, Span | None, list[Span]]:
    """``(answer, its span, the pieces of the answer region between extra tags)``; None, None when empty."""
    text = tags.text
    if ans_lo is None or ans_hi < ans_lo:
        return None, None, []
    ans_pieces = _pieces(ans_lo, ans_hi, tags.extras)
    joined = "".join(text[s:e] for s, e in ans_pieces).strip()
    if not joined:
        return None, None, ans_pieces
    first = next(_strip_span(text, s, e) for s, e in ans_pieces if text[s:e].strip())
    last = next(_strip_span(text, s, e) for s, e in reversed(ans_pieces) if text[s:e].strip())
    return joined, (first[0], last[1]), ans_pieces


def _tag_errors(tags: _Tags, think_start: int) -> list[Span]:
    """Bad characters, extra tags, missing tags and text outside or between the tags."""
    a0, a1, a2, a3 = tags.anchors
    n = len(tags.text)
    errors: list[Span] = [m.span() for m in _BAD_CHARS_RE.finditer(tags.text)]
    errors.extend(tags.extras)
    if a0 is None:
        errors.append(tags.token_at(0))
    if a1 is None:
        nxt = tags.next_anchor(think_start)
        errors.append(nxt if nxt else tags.last_char())
    if a2 is None:
        if a1 is not None:
            errors.append(tags.token_at(a1[1]))
        else:
            errors.append(a3 if a3 else tags.last_char())
    if a3 is None:
        errors.append(tags.last_char())
    if a0 is not None and a0[0] > 0:
        errors.append((0, a0[0]))
    if a1 is not None and a2 is not None and a2[0] > a1[1]:
        errors.append((a1[1], a2[0]))
    if a3 is not None and a3[1] < n:
        errors.append((a3[1], n))
    return errors


def _think_body_errors(tags: _Tags, think_start: int, think_end: int) -> list[Span]:
    """The think body must be non-empty lines without edge spaces (or no body at all)."""
    if think_end <= think_start:
        return []
    text, errors = tags.text, []
    pos = think_start
    lines = text[think_start:think_end].split("\n")
    for i, line in enumerate(lines):
        s, e = pos, pos + len(line)
        content = "".join(text[a:b] for a, b in _pieces(s, e, tags.extras))
        if not content.strip(" "):
            if line:
                errors.append((s, e))
            elif i + 1 < len(lines):
                errors.append((e, e + 1))  # the newline after the empty line
            else:
                errors.append((s - 1, s))  # the newline before it
        else:
            if line.startswith(" "):
                errors.append((s, s + len(line) - len(line.lstrip(" "))))
            if line.endswith(" "):
                errors.append((s + len(line.rstrip(" ")), e))
        pos = e + 1
    return errors


def _answer_body_errors(tags: _Tags, ans_lo: int | None, ans_hi: int, ans_pieces: list[Span]) -> list[Span]:
    """The answer body must be one non-empty line without edge spaces."""
    if ans_lo is None or ans_hi < ans_lo:
        return []
    text, a3 = tags.text, tags.anchors[3]
    content = "".join(text[s:e] for s, e in ans_pieces)
    if not content.strip(" \n"):
        return [a3 if a3 else tags.last_char()]
    errors = [(ans_lo + m.start(), ans_lo + m.end()) for m in re.finditer("\n", text[ans_lo:ans_hi])]
    body = text[ans_lo:ans_hi]
    if body.startswith(" "):
        errors.append((ans_lo, ans_lo + len(body) - len(body.lstrip(" "))))
    if body.endswith(" "):
        errors.append((ans_lo + len(body.rstrip(" ")), ans_hi))
    return errors


def parse_completion(text: str) -> ParsedCompletion:
    """Parse a completion (any string) into steps, answer and format errors. Never raises."""
    tags = _Tags.of(text)
    think_start, think_end, ans_lo, ans_hi = _regions(tags)
    answer, answer_span, ans_pieces = _answer(tags, ans_lo, ans_hi)
    errors = _tag_errors(tags, think_start)
    errors += _think_body_errors(tags, think_start, think_end)
    errors += _answer_body_errors(tags, ans_lo, ans_hi, ans_pieces)
    return ParsedCompletion(
        steps=tuple(_steps(tags, think_start, think_end)),
        answer=answer,
        answer_span=answer_span,
        format_errors=_merge(errors),
        think_span=(think_start, think_end),
    )

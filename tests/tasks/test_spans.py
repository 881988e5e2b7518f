"""char_spans_to_token_spans on hand examples, and end to end from a grade to token spans."""

from __future__ import annotations

from ablate.tasks import FORMAT_TAGS, TASKS, char_spans_to_token_spans


def test_character_level_offsets():
    offsets = [(i, i + 1) for i in range(5)]  # "ab\ncd", one token per character
    assert char_spans_to_token_spans(offsets, [(0, 2), (3, 5), (2, 3)]) == [(0, 2), (3, 5), (2, 3)]


def test_multi_character_tokens():
    # "<think>1+2+0=3</think><answer>3</answer>" with each tag one token, then EOS with an empty span
    text = "<think>1+2+0=3</think><answer>3</answer>"
    offsets = [(0, 7)] + [(i, i + 1) for i in range(7, 14)] + [(14, 22), (22, 30), (30, 31), (31, 40), (40, 40)]
    assert len(offsets) == 13 and offsets[-2][1] == len(text)
    spans = [(7, 14), (30, 31), (31, 40), (3, 5), (12, 23)]
    assert char_spans_to_token_spans(offsets, spans) == [(1, 8), (10, 11), (11, 12), (0, 1), (6, 10)]
    # an empty span covers no token: (k, k) at the first token starting at or after it
    assert char_spans_to_token_spans(offsets, [(40, 40), (7, 7)]) == [(12, 12), (1, 1)]


def test_word_level_tokens_and_special_tokens():
    # "12+34" as "<bos>" (empty span), "12", "+", "34"
    offsets = [(0, 0), (0, 2), (2, 3), (3, 5)]
    assert char_spans_to_token_spans(offsets, [(1, 4), (0, 1), (4, 5)]) == [(1, 4), (1, 2), (3, 4)]


def char_and_tag_offsets(text: str) -> list[tuple[int, int]]:
    """Offsets as the zoo's character-level tokenizer gives them: one per character, one per format tag.

    (Built here rather than with ``ablate.models.tokenizer``, whose transformers import alone costs more
    than this folder's time budget.)
    """
    out, pos = [], 0
    while pos < len(text):
        tag = next((t for t in FORMAT_TAGS if text.startswith(t, pos)), None)
        step = len(tag) if tag else 1
        out.append((pos, pos + step))
        pos += step
    return out


def test_grade_spans_land_on_the_step_tokens():
    task = TASKS.get("addition")()
    p = task.make(357, 486)
    offsets = char_and_tag_offsets(p.solution)
    assert len(offsets) == 32  # steps of 8, 8 and 7 characters, 2 newlines, 4 tags, 3 answer digits
    bad = p.solution.replace("5+8+1=14", "5+8+1=15")
    g = task.grade(p, bad)
    spans = char_spans_to_token_spans(offsets, [s.span for s in g.steps])
    assert spans == [(1, 9), (10, 18), (19, 26)]
    assert [s.correct for s in g.steps] == [True, False, True]  # the reward of step 2 goes on token 17
    broken = p.solution.replace("</think>", "")
    g = task.grade(p, broken)
    offsets = char_and_tag_offsets(broken)
    (err,) = char_spans_to_token_spans(offsets, g.format_errors)
    assert err == (26, 27) and broken[slice(*offsets[26])] == "<answer>"  # in place of </think>

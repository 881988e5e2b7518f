"""The completion format: rendering, lenient parsing and the local format errors, on hand examples."""

from __future__ import annotations

from ablate.tasks import FORMAT_RE, parse_completion, render_completion

REF = "<think>7+6+0=13\n5+8+1=14\n3+4+1=8</think><answer>843</answer>"


def errors(text: str) -> list[str]:
    return [text[s:e] for s, e in parse_completion(text).format_errors]


def test_render_layout():
    assert render_completion(["7+6+0=13", "5+8+1=14", "3+4+1=8"], "843") == REF
    assert render_completion([], "5") == "<think></think><answer>5</answer>"


def test_parse_reference():
    p = parse_completion(REF)
    assert p.format_ok and p.format_errors == ()
    assert p.steps == (("7+6+0=13", (7, 15)), ("5+8+1=14", (16, 24)), ("3+4+1=8", (25, 32)))
    assert p.answer == "843" and p.answer_span == (48, 51)
    assert p.think_span == (7, 32)
    assert FORMAT_RE.fullmatch(REF)


def test_missing_tags_are_reported_where_they_should_have_been():
    # <think> missing: the first character
    assert parse_completion(REF[7:]).format_errors == ((0, 1),)
    # </think> missing: the <answer> that came in its place
    text = REF.replace("</think>", "")
    assert parse_completion(text).format_errors == ((32, 40),) and errors(text) == ["<answer>"]
    # <answer> missing: the first answer character
    assert errors(REF.replace("<answer>", "")) == ["8"]
    # </answer> missing: the last character
    assert errors(REF.replace("</answer>", "")) == ["3"]
    # nothing at all
    assert parse_completion("").format_errors == ((0, 0),)
    p = parse_completion("843")
    assert p.steps == (("843", (0, 3)),) and p.answer is None
    assert p.format_errors == ((0, 1), (2, 3))


def test_extra_text_tags_and_spaces_are_reported_on_themselves():
    assert errors(REF.replace("<think>", "<think><think>")) == ["<think>"]
    assert errors(REF + "x") == ["x"]
    assert errors("Sure. " + REF) == ["Sure. "]
    assert errors(REF.replace("</think>", "</think> ")) == [" "]
    assert errors("<think></think><answer></answer>") == ["</answer>"]
    assert errors("<think>\n</think><answer>1</answer>") == ["\n"]
    assert errors("<think>1\n\n2</think><answer>3</answer>") == ["\n"]
    assert parse_completion("<think>1\n\n2</think><answer>3</answer>").format_errors == ((9, 10),)
    assert errors("<think></think><answer>1\n2</answer>") == ["\n"]
    assert errors("<think>a\tb</think><answer>1</answer>") == ["\t"]
    text = "<think> 1\n2 </think><answer>3</answer>"
    p = parse_completion(text)
    assert p.format_errors == ((7, 8), (11, 12))
    assert p.steps == (("1", (8, 9)), ("2", (10, 11))) and p.answer == "3"


def test_lenient_reading_of_broken_completions():
    # a stray tag inside the think part separates steps
    p = parse_completion("<think>1+1=2<answer>2+2=4</think><answer>4</answer>")
    assert [t for t, _ in p.steps] == ["1+1=2", "2+2=4"] and p.answer == "4" and not p.format_ok
    # duplicated <answer>: the answer is still read
    assert parse_completion(REF.replace("<answer>", "<answer><answer>")).answer == "843"
    # answer without <answer>: the text after </think>
    assert parse_completion("<think>x</think>12").answer == "12"
    # a misspelt tag is text: it breaks the format and sticks to the step it touches
    p = parse_completion(REF.replace("</think>", "</thinkk>"))
    assert p.steps[-1][0] == "3+4+1=8</thinkk>" and p.answer == "843" and not p.format_ok
    # no steps is well formed
    p = parse_completion("<think></think><answer>843</answer>")
    assert p.format_ok and p.steps == () and p.answer == "843"


def test_format_re_agrees_on_hand_cases():
    good = [REF, "<think></think><answer>1</answer>", "<think>a b</think><answer>x y</answer>"]
    bad = ["", REF + "\n", REF.replace("843", " 843"), "<think>\n</think><answer>1</answer>",
           "<think>1</think><answer>1</answer></answer>", "<think>1<think></think><answer>1</answer>"]
    for text in good:
        assert FORMAT_RE.fullmatch(text) and parse_completion(text).format_ok
    for text in bad:
        assert not FORMAT_RE.fullmatch(text) and not parse_completion(text).format_ok

"""jsonl: your own data, malformed lines reported with their line number, configurable extraction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ablate.errors import AblateError
from ablate.tasks import TASKS
from ablate.tasks.jsonl import answers_match, last_number

GSM = {
    "question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in "
    "May. How many clips did Natalia sell altogether in April and May?",
    "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips "
    "altogether in April and May.\n#### 72",
}


def write(path: Path, lines: list[str | dict]) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def jsonl(**options):
    return TASKS.get("jsonl")(**options)


def test_own_data_in_the_tags_format(tmp_path):
    f = write(tmp_path / "d.jsonl", [{"question": "3 bags of 4, eat 2?", "steps": ["3*4=12", "12-2=10"], "answer": "10"}])
    task = jsonl(path=str(f), eval_fraction=0.01)
    (p,) = task.sample("train", 1, seed=0)
    assert p.prompt == "3 bags of 4, eat 2?" and p.answer == "10"
    assert p.solution == "<think>3*4=12\n12-2=10</think><answer>10</answer>"
    g = task.grade(p, "<think>3*4=12\n12-3=9</think><answer>9</answer>")
    assert [s.correct for s in g.steps] == [True, False] and not g.answer_correct and g.format_ok
    assert g.partial == 0.0  # "9" vs "10": no digit right from the right
    g = task.grade(p, "<think>3 times 4 is 12\n12 minus 2 leaves 10</think><answer>10.0</answer>")
    assert [s.correct for s in g.steps] == [True, True] and g.answer_correct  # last numbers, numeric answer
    assert task.grade(p, "<think></think><answer>11</answer>").partial == 0.5


def test_gsm8k_style_free_text(tmp_path):
    f = write(tmp_path / "gsm.jsonl", [GSM])
    task = jsonl(path=str(f), format="none", extract="last_number", solution_field="answer",
                 steps_field="answer", eval_fraction=0.01)
    (p,) = task.sample("train", 1, seed=0)
    assert p.answer == "72"  # after '####'
    assert p.meta["steps"] == GSM["answer"].split("\n")[:2]  # the '####' line is not a step
    g = task.grade(p, p.solution)
    assert g.answer_correct and g.format_ok and g.step_accuracy == 1.0 and len(g.steps) == 2
    text = "She sold 24 in May.\nSo 72 in total."
    g = task.grade(p, text)
    assert g.answer_correct and g.parsed_answer == "72" and g.format_ok and g.format_errors == ()
    assert [s.correct for s in g.steps] == [True] and g.steps[0].span == (0, 19)
    assert g.step_accuracy == 0.5
    assert not task.grade(p, "no idea").answer_correct


def test_regex_extraction_and_exact_steps(tmp_path):
    rec = {"q": "capital of France?", "a": "Paris", "s": ["France is in Europe"], "sol": "It is Paris."}
    f = write(tmp_path / "r.jsonl", [rec])
    task = jsonl(path=str(f), prompt_field="q", answer_field="a", steps_field="s", solution_field="sol",
                 format="none", extract=r"regex:[Ii]t is (\w+)", step_match="exact", eval_fraction=0.01)
    (p,) = task.sample("train", 1, seed=0)
    assert task.grade(p, "France is  in Europe\nIt is Paris.").answer_correct
    g = task.grade(p, "France is  in Europe\nIt is Paris.")
    assert [s.correct for s in g.steps] == [True]  # whitespace collapsed
    assert not task.grade(p, "It is Lyon.").answer_correct


def test_reference_that_the_extraction_cannot_read_is_reported(tmp_path):
    f = write(tmp_path / "r.jsonl", [{"question": "x?", "answer": "Paris"}])
    with pytest.raises(AblateError, match=r"r\.jsonl:1: the reference completion .* give solution_field"):
        jsonl(path=str(f), format="none", extract=r"regex:It is (\w+)")


def test_malformed_lines_name_file_and_line(tmp_path):
    good = {"question": "1+1?", "answer": 2}
    cases = [
        ("{not json", r"bad\.jsonl:3: not valid JSON .* each line must be one JSON object"),
        ("[1, 2]", r"bad\.jsonl:3: expected a JSON object, got list"),
        ({"prompt": "1+1?", "answer": 2}, r"bad\.jsonl:3: prompt field 'question' is missing; the line has "
         r"fields: prompt, answer \(set option prompt_field\)"),
        ({"question": "1+1?"}, r"bad\.jsonl:3: answer field 'answer' is missing"),
        ({"question": "1+1?", "answer": None}, r"bad\.jsonl:3: answer field 'answer' is not a string or number"),
        ({"question": "1+1?", "answer": 2, "steps": [1, 2]}, r"bad\.jsonl:3: steps field 'steps' must be a list"),
        ({"question": "1+1?", "answer": "none here"}, None),  # fine: the whole field is the answer
    ]
    for line, pattern in cases:
        f = write(tmp_path / "bad.jsonl", [good, "", line, good])  # line 2 is blank
        if pattern is None:
            jsonl(path=str(f))
            continue
        with pytest.raises(AblateError, match=pattern):
            jsonl(path=str(f))
    f = tmp_path / "bin.jsonl"
    f.write_bytes(json.dumps(good).encode() + b"\n\xff\xfe\n")
    with pytest.raises(AblateError, match=r"bin\.jsonl:2: not valid UTF-8"):
        jsonl(path=str(f))
    f = write(tmp_path / "n.jsonl", [{"question": "q", "answer": "abc"}])
    with pytest.raises(AblateError, match=r"n\.jsonl:1: no reference answer in field 'answer'"):
        jsonl(path=str(f), reference_extract="last_number")


def test_option_errors(tmp_path):
    f = write(tmp_path / "d.jsonl", [{"question": "q", "answer": 1}])
    with pytest.raises(AblateError, match="needs option path"):
        jsonl()
    with pytest.raises(AblateError, match="not found"):
        jsonl(path=str(tmp_path / "missing.jsonl"))
    with pytest.raises(AblateError, match="invalid regular expression"):
        jsonl(path=str(f), extract="regex:(")
    with pytest.raises(AblateError, match="option extract must be one of answer_tags, last_number"):
        jsonl(path=str(f), extract="first_number")
    with pytest.raises(AblateError, match="option format must be one of tags, none"):
        jsonl(path=str(f), format="xml")
    with pytest.raises(AblateError, match="has no records"):
        jsonl(path=str(write(tmp_path / "e.jsonl", [""])))
    with pytest.raises(AblateError, match="has no eval records"):
        jsonl(path=str(f), eval_fraction=1e-9).sample("eval", 1, seed=0)


def test_eval_path_split(tmp_path):
    recs = [{"question": f"q{i}", "answer": i} for i in range(20)]
    train = write(tmp_path / "train.jsonl", recs)
    evals = write(tmp_path / "eval.jsonl", recs[:5])
    task = jsonl(path=str(train), eval_path=str(evals))
    assert {p.prompt for p in task.sample("eval", 5, seed=0)} == {f"q{i}" for i in range(5)}
    assert {p.prompt for p in task.sample("train", 15, seed=0)} == {f"q{i}" for i in range(5, 20)}
    assert len(task.sample("train", 40, seed=0)) == 40  # repeats once the split is used up


def test_answers_match_and_last_number():
    assert answers_match("1,000", "1000") and answers_match("$18", "18") and answers_match("72.0", "72")
    assert not answers_match("Paris", "paris") and answers_match(" New  York ", "New York")
    assert not answers_match(None, "1")
    assert last_number("a 12 b 1,234.5, c") == ("1234.5", (7, 14))
    assert last_number("-3 degrees") == ("-3", (0, 2))
    assert last_number("none") is None

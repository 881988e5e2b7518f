"""``ablate tasks``: every registered task is listed, with an example; --json parses."""

from __future__ import annotations

import json

from ablate.cli import main
from ablate.tasks import TASKS


def test_json_lists_every_registered_task(capsys):
    assert main(["tasks", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [e["name"] for e in data["tasks"]] == TASKS.names()
    for e in data["tasks"]:
        assert e["description"]
        if e["example"] is None:
            assert e["note"]
            continue
        task = TASKS.get(e["name"])(**e.get("example_options", {}))  # reasoning_gym's: a generator
        p = task.example()
        assert e["example"]["prompt"] == p.prompt and e["example"]["solution"] == p.solution
        assert e["example"]["answer"] == p.answer
    jsonl = next(e for e in data["tasks"] if e["name"] == "jsonl")
    assert jsonl["example"] is None and "needs option path" in jsonl["note"]
    assert "path" in jsonl["options"]


def test_named_task_with_options(capsys, jsonl_data):
    assert main(["tasks", "jsonl", "--option", f"path={jsonl_data}", "--option", "eval_fraction=0.2", "--json"]) == 0
    (e,) = json.loads(capsys.readouterr().out)["tasks"]
    assert e["example"]["prompt"].startswith("Q") and e["example"]["steps"] == 2


def test_text_output(capsys):
    assert main(["tasks", "addition", "--difficulty", "2"]) == 0
    out = capsys.readouterr().out
    p = TASKS.get("addition")(difficulty=2).example()
    assert out.startswith("addition: ") and f"prompt:   {p.prompt}" in out and f"answer:   {p.answer}" in out


def test_user_errors_exit_2(capsys):
    assert main(["tasks", "additon"]) == 2
    assert "did you mean 'addition'" in capsys.readouterr().err
    assert main(["tasks", "--option", "x=1"]) == 2
    assert "--option needs task names" in capsys.readouterr().err
    assert main(["tasks", "addition", "--option", "digits=3"]) == 2
    assert "valid options: eval_fraction" in capsys.readouterr().err
    assert main(["tasks", "jsonl"]) == 2
    assert "needs option path" in capsys.readouterr().err

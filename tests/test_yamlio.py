"""Tests of ablate.yamlio: one reader and one dialect for study files and trial files."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from ablate.config import TrialConfig, TrialConfigError
from ablate.study import StudyError, load_study
from ablate.study.plan import Plan
from ablate.yamlio import LineDict, YamlError, parse_yaml, read_yaml

STUDY = """\
name: dialect
base: {{{base}}}
factors:
  clip_high: {{path: loss.clip_high, values: [0.2, 0.28]}}
seeds: 1
objective: {{metric: eval/accuracy, mode: max}}
"""


def _study(tmp_path: Path, base: str) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(STUDY.format(base=base))
    return path


def _trial(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "trial.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_the_dialect_only_true_and_false_are_booleans_and_1e_4_is_a_float():
    doc = parse_yaml("a: on\nb: yes\nc: off\nd: no\ne: true\nf: False\ng: 1e-4\nh: 3\n")
    assert dict(doc) == {"a": "on", "b": "yes", "c": "off", "d": "no", "e": True, "f": False, "g": 1e-4, "h": 3}


def test_on_and_yes_read_the_same_in_a_study_file_and_a_trial_file(tmp_path):
    # free-form options: reasoning_gym passes them to its generator (checked where the task is built)
    task = {"task.name": "reasoning_gym", "task.dataset": "basic_arithmetic", "task.difficulty": "null",
            "task.options": "{flag: on, other: yes, real: true}"}
    study = load_study(_study(tmp_path, ", ".join(f"{k}: {v}" for k, v in task.items())))
    from_study = Plan.of(study).specs[0].config
    from_trial = TrialConfig.from_file(_trial(tmp_path, "".join(f"{k}: {v}\n" for k, v in task.items())))
    assert from_study.task.options == from_trial.task.options == {"flag": "on", "other": "yes", "real": True}


def test_yes_for_a_boolean_is_rejected_in_a_study_file_and_a_trial_file(tmp_path):
    with pytest.raises(StudyError, match="reward.overlong_filter.*valid boolean"):
        load_study(_study(tmp_path, "reward.overlong_filter: yes"))
    with pytest.raises(TrialConfigError, match=r"reward.overlong_filter \(line 1\).*valid boolean.*true or false"):
        TrialConfig.from_file(_trial(tmp_path, "reward.overlong_filter: yes\n"))
    assert TrialConfig.from_file(_trial(tmp_path, "reward.overlong_filter: true\n")).reward.overlong_filter


def test_a_duplicate_key_in_a_trial_file_is_reported_with_both_lines(tmp_path):
    path = _trial(tmp_path, "seed: 1\nloss:\n  clip_low: 0.1\nseed: 2\n")
    with pytest.raises(TrialConfigError) as info:
        TrialConfig.from_file(path)
    assert "seed (line 4): is given twice (also on line 1); keep one" in str(info.value)
    assert str(path) in str(info.value)


def test_read_yaml_keeps_lines_and_names_the_file(tmp_path):
    doc = read_yaml(_trial(tmp_path, "a: 1\nb:\n  c: [1, 2]\na: 3\n"))
    assert isinstance(doc, LineDict) and doc.key_lines == {"a": 1, "b": 2} and doc.duplicates == [("a", 4, 1)]
    with pytest.raises(YamlError) as info:
        read_yaml(tmp_path / "nope.yaml")
    assert str(info.value) == f"{tmp_path / 'nope.yaml'}: file: no such file; check the path"
    with pytest.raises(YamlError, match=r"trial.yaml:2: yaml: invalid YAML"):
        read_yaml(_trial(tmp_path, "a: [1, 2\n"))


def _bomb(levels: int = 9) -> str:
    """The "billion laughs" document: each anchor holds 9 aliases of the one before."""
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\nname: x\n"


def test_an_alias_bomb_is_refused_before_it_is_expanded(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(_bomb())
    with pytest.raises(StudyError, match=r"bomb\.yaml:1: yaml: its aliases expand to 4,412,961,518 values, more "
                                         r"than 100,000 \(an alias bomb\?\); write the values out"):
        load_study(path)
    with pytest.raises(YamlError, match="alias bomb"):
        parse_yaml(_bomb(), "trial.yaml")


def test_aliases_within_the_bounds_still_read_and_self_reference_is_refused():
    doc = parse_yaml(_bomb(levels=3))  # 9**4 + ... values: under the bound
    assert len(doc["a3"]) == 9 and doc["a3"][0] is doc["a2"]
    merged = parse_yaml("base: &b {x: 1}\narm: {<<: *b, y: 2}\n")
    assert merged["arm"] == {"x": 1, "y": 2}
    with pytest.raises(YamlError, match=r"<string>:1: yaml: invalid YAML: an alias refers to a value that "
                                        r"contains it"):
        parse_yaml("a: &x\n  b: *x\n")
    with pytest.raises(YamlError, match="nested deeper than 64 levels"):
        parse_yaml("a: " + "[" * 70 + "]" * 70 + "\n")

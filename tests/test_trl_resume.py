"""Resuming a trl trial from TRL's checkpoint says nothing about its tied embeddings (issue 53): transformers'
Trainer warned "There were missing keys in the checkpoint model loaded: ['lm_head.weight']" on every resume
of a model whose output layer is its embedding (saved once); any other missing or unexpected key still warns."""

from __future__ import annotations

import shutil
from types import SimpleNamespace

import pytest
import torch

from ablate.config import TrialConfig

trl = pytest.importorskip("trl")


class Tied(torch.nn.Module):
    """An embedding and an output layer sharing one weight, and an untied layer."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(4, 2)
        self.head = torch.nn.Linear(2, 4, bias=False)
        self.head.weight = self.embed.weight
        self.other = torch.nn.Linear(2, 2)


def test_only_the_tied_missing_keys_leave_the_warning():
    from ablate.engines.trl import quiet_tied_missing_keys, tied_missing_keys

    model = Tied()
    assert tied_missing_keys(model, ["head.weight", "other.weight"]) == {"head.weight"}
    assert tied_missing_keys(model, ["head.weight", "embed.weight"]) == set()  # both missing: nothing restores them
    said: list[SimpleNamespace] = []
    trainer = SimpleNamespace(model=model, _issue_warnings_after_load=said.append)
    quiet_tied_missing_keys(trainer)
    keys = torch.nn.modules.module._IncompatibleKeys
    trainer._issue_warnings_after_load(keys(["head.weight", "other.weight"], ["extra.weight"]))
    trainer._issue_warnings_after_load(keys(["head.weight"], []))
    assert [(s.missing_keys, s.unexpected_keys) for s in said] == [(["other.weight"], ["extra.weight"]), ([], [])]


def test_the_trainer_still_says_its_missing_keys_through_the_method_ablate_wraps():
    """The wrap is a no-op if transformers stops calling it: this transformers loads a checkpoint through it."""
    import inspect

    from transformers import Trainer

    assert "_issue_warnings_after_load" in inspect.getsource(Trainer._load_from_checkpoint)


@pytest.mark.slow
def test_a_resumed_trl_trial_prints_no_missing_keys(tmp_path, capfd):
    """A micro trl trial (micro-llama, tied embeddings) checkpointed at steps 1 and 2; its step-2 checkpoint
    removed, the same trial resumes from step 1 and says nothing about lm_head.weight."""
    from ablate.engines.base import EngineJob, engine_for

    c = TrialConfig.from_overrides({
        "warmstart.enabled": False, "task.difficulty": 1, "rollout.prompts_per_step": 2, "rollout.group_size": 4,
        "rollout.max_new_tokens": 8, "algo.minibatches": 1, "eval.n_problems": 4, "task.train_size": 64,
        "engine.name": "trl", "threads": 1, "device": "cpu", "model.name": "micro-llama", "train.steps": 2,
        "eval.every": 2, "train.checkpoint_every": 1})
    engine_for(c).train(EngineJob(c, lambda m, s: None, workdir=tmp_path))
    shutil.rmtree(tmp_path / "trl" / "checkpoint-2")
    capfd.readouterr()
    result = engine_for(c).train(EngineJob(c, lambda m, s: None, workdir=tmp_path))
    err = capfd.readouterr().err
    assert result.resumed_from == 1
    assert "missing keys" not in err and "lm_head" not in err, err

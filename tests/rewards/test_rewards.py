import pytest
import torch
from tolerance import OPS, assert_close

from ablate.errors import ConfigError
from ablate.rewards import (
    REWARDS,
    RewardContext,
    compute_token_rewards,
    last_token_index,
    place_on_last_token,
    step_mask_from_grades,
)
from ablate.tasks import Grade, StepCheck


def char_offsets(text: str, width: int) -> list[tuple[int, int]]:
    """Offsets of a character-level tokenization of ``text`` + EOS, padded to ``width``."""
    offs = [(i, i + 1) for i in range(len(text))] + [(len(text), len(text))]
    return offs + [(len(text), len(text))] * (width - len(offs))


def grade(correct=True, fmt=True, steps=(), n_ref=2, partial=1.0, errors=()):
    return Grade(
        answer_correct=correct,
        parsed_answer="1" if correct else "2",
        format_ok=fmt,
        format_errors=tuple(errors),
        steps=tuple(StepCheck(span, ok) for span, ok in steps),
        num_reference_steps=n_ref,
        partial=partial,
    )


@pytest.fixture
def ctx():
    # row 0: "ab\ncd" + EOS = 6 tokens; row 1: "xy" + EOS = 3 tokens; width T = 7
    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0, 0]], dtype=torch.float32)
    grades = [
        grade(True, True, steps=[((0, 2), True), ((3, 5), False)], n_ref=2, partial=0.5),
        grade(False, False, steps=[((0, 2), True)], n_ref=2, partial=0.25, errors=[(1, 2)]),
    ]
    offsets = [char_offsets("ab\ncd", 7), char_offsets("xy", 7)]
    logp = torch.tensor([[-1.0, -2.0, -0.5, -0.1, -3.0, -1.0, 99.0], [-1.0, -1.0, -2.0, 7.0, 7.0, 7.0, 7.0]])
    ref = torch.tensor([[-1.5, -1.0, -0.5, -0.3, -2.0, -1.0, -5.0], [-2.0, -1.0, -1.0, 0.0, 0.0, 0.0, 0.0]])
    return RewardContext(
        mask=mask,
        grades=grades,
        offsets=offsets,
        truncated=torch.tensor([False, True]),
        logp=logp,
        ref_logp=ref,
        generator=torch.Generator().manual_seed(0),
    )


def test_last_token_index_and_placement():
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]], dtype=torch.float32)
    assert last_token_index(mask).tolist() == [2, 0, 0]
    out = place_on_last_token(torch.tensor([2.0, -1.0, 5.0]), mask)
    assert out.tolist() == [[0, 0, 2, 0], [-1, 0, 0, 0], [0, 0, 0, 0]]


def test_final_answer_on_last_token(ctx):
    out = REWARDS.get("final_answer")(ctx)
    expected = torch.zeros(2, 7)
    expected[0, 5] = 1.0
    assert torch.equal(out, expected)


def test_prm_oracle_on_last_token_of_each_step(ctx):
    out = REWARDS.get("prm")(ctx)
    expected = torch.zeros(2, 7)
    expected[0, 1] = 0.5  # step "ab" correct, normalized by 2 reference steps
    expected[0, 4] = 0.0  # step "cd" incorrect
    expected[1, 1] = 0.5
    assert torch.equal(out, expected)
    out = REWARDS.get("prm")(ctx, correct=1.0, incorrect=-1.0, normalize=False)
    assert out[0, 1] == 1.0 and out[0, 4] == -1.0 and out[1, 1] == 1.0
    assert out.abs().sum() == 3.0


def test_prm_noisy_flips_labels(ctx):
    flipped = REWARDS.get("prm")(ctx, source="noisy", flip_prob=1.0, correct=1.0, incorrect=-1.0, normalize=False)
    assert flipped[0, 1] == -1.0 and flipped[0, 4] == 1.0 and flipped[1, 1] == -1.0
    same = REWARDS.get("prm")(ctx, source="noisy", flip_prob=0.0, correct=1.0, incorrect=-1.0, normalize=False)
    assert torch.equal(same, REWARDS.get("prm")(ctx, correct=1.0, incorrect=-1.0, normalize=False))


def test_prm_noisy_flip_rate_and_determinism():
    n = 2000
    mask = torch.ones(n, 3)
    grades = [grade(True, steps=[((0, 1), True)], n_ref=1) for _ in range(n)]
    offsets = [char_offsets("ab", 3)] * n

    def run(seed):
        c = RewardContext(mask=mask, grades=grades, offsets=offsets, generator=torch.Generator().manual_seed(seed))
        return REWARDS.get("prm")(c, source="noisy", flip_prob=0.3)

    a, b, c = run(1), run(1), run(2)
    assert torch.equal(a, b) and not torch.equal(a, c)
    flip_rate = 1.0 - a[:, 0].mean().item()
    assert 0.26 < flip_rate < 0.34


def test_prm_learned_scores(ctx):
    ctx.extra["prm_scores"] = [[0.9, 0.2], [0.5]]
    out = REWARDS.get("prm")(ctx, source="learned", normalize=False, correct=1.0, incorrect=-1.0)
    assert out[0, 1].item() == pytest.approx(0.8)
    assert out[0, 4].item() == pytest.approx(-0.6)
    assert out[1, 1].item() == pytest.approx(0.0)


def test_prm_bad_options(ctx):
    with pytest.raises(ConfigError, match="oracle, noisy, learned"):
        REWARDS.get("prm")(ctx, source="magic")
    with pytest.raises(ConfigError, match="needs a learned PRM"):
        REWARDS.get("prm")(ctx, source="learned")


def test_kl_reward_every_token(ctx):
    out = REWARDS.get("kl")(ctx, beta=0.1)
    expected = -0.1 * (ctx.logp - ctx.ref_logp) * ctx.mask
    assert_close(out, expected, OPS)
    assert out[0, 6] == 0 and out[1, 3:].abs().sum() == 0  # padding ignored even with garbage logp
    assert out[0, 0].item() == pytest.approx(-0.05)


def test_format_sequence_and_local(ctx):
    seq = REWARDS.get("format")(ctx)
    assert seq[0, 5] == 1.0 and seq.sum() == 1.0
    local = REWARDS.get("format")(ctx, mode="local")
    expected = torch.zeros(2, 7)
    expected[1, 1] = -1.0  # the format error spans character 1 ("y") of row 1
    assert torch.equal(local, expected)


def test_format_local_error_at_end_goes_to_last_token():
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    c = RewardContext(mask=mask, grades=[grade(fmt=False, errors=[(2, 2)])], offsets=[char_offsets("ab", 4)])
    out = REWARDS.get("format")(c, mode="local")
    assert out.tolist() == [[0.0, 0.0, -1.0, 0.0]]


def test_partial_missing_eos(ctx):
    assert REWARDS.get("partial")(ctx)[0, 5].item() == 0.5
    assert REWARDS.get("partial")(ctx)[1, 2].item() == 0.25
    eos = REWARDS.get("missing_eos")(ctx)
    assert eos[1, 2] == -1.0 and eos.sum() == -1.0


@pytest.mark.parametrize("length,expected", [(5, 0.0), (6, 0.0), (7, -0.25), (8, -0.5), (10, -1.0), (11, -1.0)])
def test_soft_overlong(length, expected):
    mask = torch.zeros(1, 12)
    mask[0, :length] = 1
    c = RewardContext(mask=mask, grades=[grade()], offsets=[char_offsets("a" * (length - 1), 12)])
    out = REWARDS.get("soft_overlong")(c, max_len=10, cache=4)
    assert out[0, length - 1].item() == pytest.approx(expected)
    assert out.sum().item() == pytest.approx(expected)


def test_step_mask(ctx):
    sm = step_mask_from_grades(ctx)
    expected = torch.zeros(2, 7)
    expected[0, 1] = expected[0, 4] = expected[1, 1] = 1.0
    assert torch.equal(sm, expected)


def test_compute_token_rewards_weights_and_sum(ctx):
    total, parts = compute_token_rewards(ctx, {"final_answer": (2.0, {}), "prm": (0.5, {"normalize": False})})
    assert set(parts) == {"final_answer", "prm"}
    assert_close(total, parts["final_answer"] + parts["prm"], OPS)
    assert total[0, 5].item() == 2.0 and total[0, 1].item() == 0.5 and total[0, 4].item() == 0.0


OPTIONS = {"soft_overlong": {"max_len": 6, "cache": 2}}


@pytest.mark.parametrize("name", REWARDS.names())
def test_every_component_respects_mask_and_shape(ctx, name):
    out = REWARDS.get(name)(ctx, **OPTIONS.get(name, {}))
    assert out.shape == ctx.mask.shape
    assert torch.all(out[ctx.mask == 0] == 0)
    assert torch.isfinite(out).all()

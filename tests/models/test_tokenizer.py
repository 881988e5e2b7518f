from __future__ import annotations

import random

import pytest
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from ablate.models.tokenizer import CHARACTERS, FORMAT_TAGS, SPECIAL_TOKENS, build_tokenizer, char_vocab

COMPLETION = "<think>\n3+9=12 carry 1\n1+2+1=4\n</think>\n<answer>42</answer>"


@pytest.fixture(scope="module")
def tok() -> PreTrainedTokenizerFast:
    return build_tokenizer()


def test_is_a_real_fast_tokenizer_with_fixed_ids(tok):
    assert isinstance(tok, PreTrainedTokenizerFast)
    assert len(tok) == 104 == 4 + 95 + 1 + 4
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2, 3)
    assert tok.convert_tokens_to_ids(list(FORMAT_TAGS)) == [100, 101, 102, 103]
    assert tok.convert_tokens_to_ids([" ", "0", "A", "~", "\n"]) == [4, 20, 37, 98, 99]
    assert tok.get_vocab() == char_vocab()
    assert len(CHARACTERS) == 96 and len(SPECIAL_TOKENS) == 4
    # Two builds give the same table.
    assert build_tokenizer().get_vocab() == tok.get_vocab()


def test_characters_and_tags_are_single_tokens(tok):
    ids = tok.encode("<think>12+3</think>", add_special_tokens=False)
    # "1" = 4 + (49 - 32) = 21, "2" = 22, "+" = 4 + 11 = 15, "3" = 23
    assert ids == [100, 21, 22, 15, 23, 101]
    assert tok.encode("a b", add_special_tokens=False) == [69, 4, 70]
    assert tok.encode("12", add_special_tokens=True) == [1, 21, 22]  # <bos> prepended, no <eos>


@pytest.mark.parametrize(
    "text", ["12+3", COMPLETION, " leading and trailing  ", "a\n\nb", "x<answer>y</answer>z", "<think></think>"]
)
def test_decode_gives_back_exactly_the_text(tok, text):
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text
    assert tok.decode(ids, skip_special_tokens=True) == text  # format tags are not special


def test_round_trip_of_random_printable_strings(tok):
    rng = random.Random(0)
    alphabet = list(CHARACTERS) + list(FORMAT_TAGS)
    for _ in range(200):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        assert tok.decode(tok.encode(text, add_special_tokens=False)) == text


def test_special_tokens_decode_and_skip(tok):
    ids = [1, 21, 15, 22, 2, 0, 0]
    assert tok.decode(ids) == "<bos>1+2<eos><pad><pad>"
    assert tok.decode(ids, skip_special_tokens=True) == "1+2"


def test_unknown_characters_become_unk(tok):
    assert tok.encode("1\t2é", add_special_tokens=False) == [21, 3, 22, 3]


def test_offsets_mapping(tok):
    enc = tok("<think>1+2</think>", return_offsets_mapping=True)
    assert enc["input_ids"] == [1, 100, 21, 15, 22, 101]
    assert enc["offset_mapping"] == [(0, 0), (0, 7), (7, 8), (8, 9), (9, 10), (10, 18)]


def test_batch_padding_is_right_side(tok):
    enc = tok(["1", "123"], padding=True, add_special_tokens=False)
    assert enc["input_ids"] == [[21, 0, 0], [21, 22, 23]]
    assert enc["attention_mask"] == [[1, 0, 0], [1, 1, 1]]


def test_save_and_load_pretrained(tok, tmp_path):
    tok.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    assert isinstance(loaded, PreTrainedTokenizerFast)
    assert loaded.get_vocab() == tok.get_vocab()
    assert (loaded.pad_token, loaded.bos_token, loaded.eos_token, loaded.unk_token) == SPECIAL_TOKENS
    for text in [COMPLETION, "12+3"]:
        ids = loaded.encode(text)
        assert ids == tok.encode(text)
        assert loaded.decode(ids, skip_special_tokens=True) == text
    assert loaded(COMPLETION, return_offsets_mapping=True)["offset_mapping"] == tok(
        COMPLETION, return_offsets_mapping=True
    )["offset_mapping"]

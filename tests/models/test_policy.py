"""Policy.decode_with_offsets: the one-decode-per-row path gives exactly the spans of incremental
decoding, on the zoo's tokenizer and on tokenizers where a token decodes differently alone."""

from __future__ import annotations

import random

import pytest

from ablate.models import Policy
from ablate.models.policy import _incremental_offsets
from ablate.models.tokenizer import build_tokenizer


def _metaspace_tokenizer():
    """A SentencePiece-like tokenizer: '▁' marks a word start and the decoder turns it into a space,
    except at the start of the text, so '▁b' decodes to 'b' alone but to ' b' after 'a'."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<bos>": 1, "<eos>": 2, "<unk>": 3, "▁a": 4, "▁b": 5, "c": 6, "▁": 7, "a": 8, "b": 9}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>",
                                   unk_token="<unk>", clean_up_tokenization_spaces=False)


def _byte_level_tokenizer():
    """Byte-level BPE without merges: 'é' is two tokens, each of which decodes alone to U+FFFD."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {"<pad>": 0, "<bos>": 1, "<eos>": 2, "<unk>": 3}
    vocab.update({ch: i + 4 for i, ch in enumerate(sorted(alphabet))})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>",
                                   unk_token="<unk>", clean_up_tokenization_spaces=False)


def _incremental(policy: Policy, ids: list[int]) -> tuple[str, list[tuple[int, int]]]:
    """The definition: decode every prefix of the ids before the first EOS or pad."""
    kept: list[int] = []
    for t in ids:
        if t in (policy.eos_token_id, policy.pad_token_id):
            break
        kept.append(t)
    text = policy.tokenizer.decode(kept, skip_special_tokens=False) if kept else ""
    return text, _incremental_offsets(policy.tokenizer, kept, len(ids))


def test_char_tokenizer_spans_equal_incremental_decoding_on_random_rows():
    policy = Policy(model=None, tokenizer=build_tokenizer(), name="char")  # type: ignore[arg-type]
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(0, 40)
        ids = [rng.choice([rng.randint(3, 103), rng.randint(100, 103), 2, 0]) for _ in range(n)]
        assert policy.decode_with_offsets(ids) == _incremental(policy, ids)
    # by hand: a format tag is one token of 7 characters; the tokens after EOS get empty end spans
    assert policy.decode_with_offsets([100, 21, 2, 21]) == ("<think>1", [(0, 7), (7, 8), (8, 8), (8, 8)])


def test_a_token_that_decodes_differently_alone_gets_the_incremental_spans():
    policy = Policy(model=None, tokenizer=_metaspace_tokenizer(), name="metaspace")  # type: ignore[arg-type]
    ids = [4, 5, 6, 2]  # '▁a' '▁b' 'c' <eos>
    assert policy.tokenizer.decode([5]) == "b" and policy.tokenizer.decode([4, 5]) == "a b"
    text, offsets = policy.decode_with_offsets(ids)
    assert text == "a bc"
    assert offsets == [(0, 1), (1, 3), (3, 4), (4, 4)]  # ' b' is two characters after 'a'
    rng = random.Random(1)
    for _ in range(100):
        ids = [rng.randint(2, 9) for _ in range(rng.randint(0, 12))]
        assert policy.decode_with_offsets(ids) == _incremental(policy, ids)


@pytest.mark.parametrize("text", ["ab c", "é!", "a é b", "naïve café"])
def test_byte_level_spans_equal_incremental_decoding_with_and_without_split_characters(text):
    tok = _byte_level_tokenizer()
    policy = Policy(model=None, tokenizer=tok, name="bytes")  # type: ignore[arg-type]
    ids = tok.encode(text, add_special_tokens=False) + [2, 0]
    assert policy.decode_with_offsets(ids) == _incremental(policy, ids)
    assert policy.decode_with_offsets(ids)[0] == text
    if text == "é!":  # the first span covers U+FFFD (half a character), the second completes 'é'
        assert policy.decode_with_offsets(ids)[1][:3] == [(0, 1), (1, 1), (1, 2)]

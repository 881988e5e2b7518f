"""The character-level tokenizer of the zoo models: a real Hugging Face fast tokenizer.

One token per character of printable ASCII (codes 32..126) and ``"\\n"``, the four format tags
``<think> </think> <answer> </answer>`` as single tokens, and the special tokens ``<pad> <bos> <eos>
<unk>``. It is built with the ``tokenizers`` library (a BPE model without merges, so every word is
split into its characters; a ``Fuse`` decoder, so decoding concatenates tokens without inserting
spaces) and wrapped in :class:`transformers.PreTrainedTokenizerFast`, so that it saves and loads with
``save_pretrained`` / ``from_pretrained`` and returns offset mappings like any Hugging Face tokenizer.

Ids are fixed (the same vocabulary on every build)::

    0 <pad>  1 <bos>  2 <eos>  3 <unk>  4..98 " ".."~"  99 "\\n"
    100 <think>  101 </think>  102 <answer>  103 </answer>

Usage::

    tok = build_tokenizer()
    ids = tok.encode("<think>1+2</think>", add_special_tokens=False)   # [100, 21, 15, 22, 101]
    tok.decode(ids) == "<think>1+2</think>"
    tok("1+2").input_ids                                                # [1, 21, 15, 22]: <bos> first
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

#: Special tokens, in id order (ids 0..3).
PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD, BOS, EOS, UNK)

#: Every ordinary character, in id order (ids 4..99): printable ASCII, then the newline.
CHARACTERS: tuple[str, ...] = tuple(chr(c) for c in range(32, 127)) + ("\n",)

#: The format tags of the tasks' completion format, each one token (ids 100..103).
FORMAT_TAGS: tuple[str, ...] = ("<think>", "</think>", "<answer>", "</answer>")


def char_vocab() -> dict[str, int]:
    """The fixed token → id table (specials, characters, format tags), 104 entries."""
    tokens = SPECIAL_TOKENS + CHARACTERS + FORMAT_TAGS
    return {tok: i for i, tok in enumerate(tokens)}


def build_tokenizer() -> PreTrainedTokenizerFast:
    """Build the character-level fast tokenizer (deterministic: the same ids on every call).

    Returns:
        A :class:`~transformers.PreTrainedTokenizerFast` with ``pad/bos/eos/unk`` set, 104 tokens,
        right padding, ``<bos>`` prepended when ``add_special_tokens`` is true (the default), and ``clean_up_tokenization_spaces=False`` (so ``decode`` gives back exactly
        the text that was encoded).
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, processors
    from transformers import PreTrainedTokenizerFast

    vocab = char_vocab()
    base = {t: i for t, i in vocab.items() if t not in FORMAT_TAGS}
    # BPE without merges: each pre-token (the whole text, there is no pre-tokenizer) is split into
    # characters, each mapped to its id; characters outside the alphabet become <unk>.
    tok = Tokenizer(models.BPE(vocab=base, merges=[], unk_token=UNK, fuse_unk=False))
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in FORMAT_TAGS])
    # Like Llama tokenizers: ``tok(text)`` prepends <bos>; ``add_special_tokens=False`` does not.
    bos_id = vocab[BOS]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, bos_id)]
    )
    for t, i in vocab.items():  # the ids are part of the contract
        assert tok.token_to_id(t) == i, (t, tok.token_to_id(t), i)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        clean_up_tokenization_spaces=False,
        padding_side="right",
    )

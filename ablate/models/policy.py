"""The policy: a causal language model with its tokenizer and how prompts are rendered.

Everything that samples from or trains a model goes through a :class:`Policy`, so a tiny zoo model,
a local Hugging Face checkpoint and a pretrained chat model (rendered through its chat template)
are used the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


@dataclass
class Policy:
    """A causal LM, its tokenizer and its prompt rendering.

    Attributes:
        model: a Hugging Face causal LM (``AutoModelForCausalLM``-compatible).
        tokenizer: its tokenizer; must define ``eos_token_id`` and ``pad_token_id``.
        name: the zoo name or checkpoint path it came from.
        use_chat_template: render prompts through ``tokenizer.apply_chat_template`` (pretrained chat
            models) instead of ``[bos] + prompt tokens`` (zoo models).
    """

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    name: str
    use_chat_template: bool = False
    #: token id -> its text decoded alone (filled lazily by :meth:`decode_with_offsets`)
    _pieces: dict[int, str] = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def eos_token_id(self) -> int:
        return int(self.tokenizer.eos_token_id)

    @property
    def pad_token_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return int(pad if pad is not None else self.tokenizer.eos_token_id)

    @property
    def device(self):
        return next(self.model.parameters()).device

    def encode_prompt(self, prompt: str) -> list[int]:
        """Token ids of a prompt as the model sees it (chat template or ``[bos] + prompt``)."""
        tok = self.tokenizer
        if self.use_chat_template:
            ids = tok.apply_chat_template(
                [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True
            )
            if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # BatchEncoding in newer versions
                ids = ids["input_ids"]
            return list(ids)
        ids = tok.encode(prompt, add_special_tokens=False)
        if tok.bos_token_id is not None:
            ids = [int(tok.bos_token_id)] + list(ids)
        return list(ids)

    def decode_with_offsets(self, ids: list[int]) -> tuple[str, list[tuple[int, int]]]:
        """Decode completion ids (EOS and padding dropped) to text and per-token character offsets.

        Offsets are those of incremental decoding: token i spans ``len(decode(kept[:i]))`` to
        ``len(decode(kept[:i + 1]))``, so they describe exactly the sampled tokens (never a
        re-tokenization of the text). Tokens after the first EOS get empty spans at the end.

        Where the text is the concatenation of each token decoded alone (the zoo's character
        tokenizer, and byte-level BPE on whole characters), the spans are the pieces' cumulative
        lengths: one ``decode`` per row instead of one per token. Where it is not (a token that
        decodes differently alone, e.g. a SentencePiece word start or half of a UTF-8 character),
        every prefix is decoded as above.
        """
        eos, pad = self.eos_token_id, self.pad_token_id
        kept: list[int] = []
        for t in ids:
            t = int(t)
            if t == eos or t == pad:
                break
            kept.append(t)
        text = self.tokenizer.decode(kept, skip_special_tokens=False) if kept else ""
        pieces = [self._piece(t) for t in kept]
        if "".join(pieces) != text:
            return text, _incremental_offsets(self.tokenizer, kept, len(ids))
        offsets: list[tuple[int, int]] = []
        end = 0
        for piece in pieces:
            offsets.append((end, end + len(piece)))
            end += len(piece)
        offsets += [(end, end)] * (len(ids) - len(kept))
        return text, offsets

    def _piece(self, token: int) -> str:
        piece = self._pieces.get(token)
        if piece is None:
            piece = self._pieces[token] = self.tokenizer.decode([token], skip_special_tokens=False)
        return piece


def _incremental_offsets(tokenizer: PreTrainedTokenizerBase, kept: list[int], n: int) -> list[tuple[int, int]]:
    """Per-token spans of ``kept`` by decoding every prefix, then empty spans up to ``n`` tokens."""
    offsets: list[tuple[int, int]] = []
    prev_len = 0
    for i in range(len(kept)):
        length = len(tokenizer.decode(kept[: i + 1], skip_special_tokens=False))
        offsets.append((prev_len, length))
        prev_len = length
    return offsets + [(prev_len, prev_len)] * (n - len(kept))

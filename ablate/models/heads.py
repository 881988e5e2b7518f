"""Small networks on the policy's architecture: a copy of its backbone with a linear head.

The critic (a value per completion token) and the learned process reward model (a logit per
reasoning step) are the same network: the policy's transformer body without the LM head, plus one
``nn.Linear(hidden, 1)`` read at chosen positions. :class:`BackboneHead` is that network; it starts
from the policy's weights (a deep copy, so training it never touches the policy).

Which hidden state scores completion token ``t`` (prompt block of width ``P``):

* ``state_before=True`` — input position ``P + t - 1``, the state in which token ``t`` is *chosen*
  (the one whose logits sample it): a value function's ``V(s_t)``, as GAE expects;
* ``state_before=False`` — input position ``P + t``, the state after token ``t`` was *read*: a
  judgement of the text up to and including token ``t`` (a step classifier scores a step on the
  hidden state of its last token).
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from ablate.models.logprobs import position_ids_from_mask


def hidden_size_of(model: nn.Module) -> int:
    """Width of the hidden states of a Hugging Face causal LM (``hidden_size`` or GPT-2's ``n_embd``)."""
    cfg = model.config
    return int(cfg.hidden_size if hasattr(cfg, "hidden_size") else cfg.n_embd)


class BackboneHead(nn.Module):
    """A copy of a causal LM's backbone (``model.base_model``) with a scalar linear head.

    Attributes:
        backbone: the deep-copied transformer body (trainable, independent of the policy).
        head: ``nn.Linear(hidden, 1)``, zero-initialised, so every output starts at 0 (value 0,
            or logit 0 = probability 1/2).
    """

    def __init__(self, policy_model: nn.Module) -> None:
        super().__init__()
        self.backbone = copy.deepcopy(policy_model.base_model)
        # in the backbone's dtype, not torch's default: a float32 policy under a float64 default (issue 55)
        dtype = next(self.backbone.parameters()).dtype
        self.head = nn.Linear(hidden_size_of(policy_model), 1, dtype=dtype)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Last-layer hidden states.

        Args:
            input_ids: [B, L] token ids (padding anywhere, as long as ``attention_mask`` marks it).
            attention_mask: [B, L] 1 on real tokens; position ids count only those.

        Returns:
            [B, L, H] hidden states of the backbone.
        """
        pos = position_ids_from_mask(attention_mask)
        return self.backbone(input_ids=input_ids, attention_mask=attention_mask, position_ids=pos).last_hidden_state

    def outputs_at(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, rows: torch.Tensor,
                   cols: torch.Tensor) -> torch.Tensor:
        """The head's output at chosen input positions.

        Args:
            input_ids: [B, L]; attention_mask: [B, L].
            rows: [N] long, batch row of each position; cols: [N] long, input position in that row.

        Returns:
            [N] float32, ``head(hidden[rows[i], cols[i]])``.
        """
        hidden = self.hidden_states(input_ids, attention_mask)  # (B, L, H)
        return self.head(hidden[rows, cols]).squeeze(-1).float()  # (N,)

    def completion_outputs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, num_prompt_tokens: int,
                           *, state_before: bool) -> torch.Tensor:
        """The head's output for every completion token (see the module docstring for ``state_before``).

        Args:
            input_ids: [B, P + T] prompt block (width P) then completion block.
            attention_mask: [B, P + T].
            num_prompt_tokens: P.
            state_before: read position ``P + t - 1`` (True) or ``P + t`` (False) for token ``t``.

        Returns:
            [B, T] float32 (not masked).
        """
        hidden = self.hidden_states(input_ids, attention_mask)  # (B, P + T, H)
        p = num_prompt_tokens
        chosen = hidden[:, p - 1 : -1] if state_before else hidden[:, p:]  # (B, T, H)
        return self.head(chosen).squeeze(-1).float()  # (B, T)

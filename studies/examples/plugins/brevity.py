"""An example plugin: the reward component ``brevity``, a per-token cost of length.

A plugin is an ordinary Python module (here a file a study names as ``plugins/brevity.py``, relative
to the study file) that registers components in ablate's registries when it is imported. Once
registered, the name is valid wherever a reward component is: ``reward.components: [final_answer,
brevity]``. A plugin component has no configuration section, so its settings are module constants.
"""

from __future__ import annotations

import torch

from ablate.rewards import REWARDS, RewardContext, place_on_last_token

#: Reward per completion token (negative: a cost), placed on the last token of each completion.
PER_TOKEN = -0.005


@REWARDS.register("brevity")
def brevity(ctx: RewardContext) -> torch.Tensor:
    """``PER_TOKEN x length`` on the last active token of each completion, 0 elsewhere.

    Shapes: ``ctx.mask`` [B, T] (1 on generated tokens, EOS included) -> [B, T].
    """
    return place_on_last_token(PER_TOKEN * ctx.mask.sum(dim=1).float(), ctx.mask)

import math

import pytest
import torch

from ablate.rl.masking import (
    as_bool_mask,
    check_same_shape,
    masked_mean,
    masked_sum,
    masked_whiten,
    zero_padding,
)

F64 = torch.float64


def test_zero_padding_blocks_values_and_nan_gradients():
    x = torch.tensor([[1.0, 1e4], [2.0, 3.0]], dtype=F64, requires_grad=True)
    mask = torch.tensor([[1, 0], [1, 1]])
    y = torch.exp(zero_padding(x, mask))  # exp(1e4) would be inf and its gradient 0 * inf = NaN
    zero_padding(y, mask).sum().backward()
    assert torch.equal(x.grad, torch.tensor([[math.e, 0.0], [math.exp(2), math.exp(3)]], dtype=F64))
    assert as_bool_mask(torch.tensor([0.0, 2.0])).tolist() == [False, True]


def test_masked_sum_and_mean():
    x = torch.tensor([[1.0, 2.0, 9.0], [4.0, 9.0, 9.0], [9.0, 9.0, 9.0]], dtype=F64)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])
    assert masked_sum(x, mask).item() == 7.0
    assert masked_sum(x, mask, dim=-1).tolist() == [3.0, 4.0, 0.0]
    assert masked_mean(x, mask).item() == pytest.approx(7 / 3)
    assert masked_mean(x, mask, dim=-1).tolist() == [1.5, 4.0, 0.0]  # empty row: 0, not NaN


def test_masked_whiten_hand_computed():
    x = torch.tensor([[1.0, 2.0, 1e4], [3.0, -1e4, -1e4]], dtype=F64)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    # active 1, 2, 3: mean 2, unbiased variance 1
    out = masked_whiten(x, mask, eps=0.0)
    assert out.tolist() == [[-1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]
    single = masked_whiten(x, torch.tensor([[1, 0, 0], [0, 0, 0]]))
    assert torch.count_nonzero(single) == 0


def test_check_same_shape():
    check_same_shape(a=torch.zeros(2, 3), b=torch.zeros(2, 3), c=None)
    with pytest.raises(ValueError, match=r"a\[2, 3\], b\[2, 4\]"):
        check_same_shape(a=torch.zeros(2, 3), b=torch.zeros(2, 4))
    with pytest.raises(ValueError, match="2-D"):
        check_same_shape(a=torch.zeros(6))

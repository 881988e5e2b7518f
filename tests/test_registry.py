import pytest

from ablate.errors import AblateError, UnknownNameError
from ablate.registry import ALL_REGISTRIES, Registry, nearest


@pytest.fixture
def reg():
    r = Registry("test widget")
    yield r
    del ALL_REGISTRIES["test widget"]


def test_register_decorator_and_get(reg):
    @reg.register("alpha")
    def alpha():
        return 1

    assert reg.get("alpha") is alpha
    assert "alpha" in reg and "beta" not in reg
    assert reg.names() == ["alpha"]
    assert len(reg) == 1


def test_register_twice_raises(reg):
    reg.register("alpha", 1)
    with pytest.raises(ValueError, match="registered already"):
        reg.register("alpha", 2)
    assert reg.get("alpha") == 1


def test_unknown_name_lists_valid_names_and_nearest(reg):
    reg.register("token-mean", 1)
    reg.register("seq-mean-token-mean", 2)
    with pytest.raises(UnknownNameError) as info:
        reg.get("token_mean")
    msg = str(info.value)
    assert "unknown test widget 'token_mean'" in msg
    assert "valid names: token-mean, seq-mean-token-mean" in msg
    assert "did you mean 'token-mean'?" in msg
    assert isinstance(info.value, AblateError)


def test_duplicate_kind_raises(reg):
    with pytest.raises(ValueError):
        Registry("test widget")


def test_nearest():
    assert nearest("grpoo", ["grpo", "gae"]) == "grpo"
    assert nearest("zzzz", ["grpo", "gae"]) is None

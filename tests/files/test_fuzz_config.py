"""Property tests of what a project and its environment hand the product: any pyproject.toml gives its
settings or one of our errors, and any value of each environment variable the product reads gives a value
or one of our errors (never int()'s or float()'s ValueError, an AttributeError, a hang or a MemoryError).
The example counts are modest so the suite stays quick; ``--hypothesis-seed`` reproduces a failure."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_npufuse.errors import NpufuseError
from pytest_npufuse.simulate.host import threads_from_environment
from pytest_npufuse.simulate.routing import routing_of
from pytest_npufuse.target.userconfig import load_user_config
from pytest_npufuse.torch_npu import distributed
from pytest_npufuse.torch_npu.testing.common_utils import get_npu_device
from pytest_npufuse.torch_npu.testing.testcase import seed_from_environment

FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)

PYPROJECT = (
    '[project]\nname = "demo"\n\n[tool.npufuse]\nnpu_target = "mine"\n\n[tool.npufuse.targets.mine]\n'
    'base = "a3"\n[tool.npufuse.targets.mine.memory]\nhbm_gbps = 1200.0\n[tool.npufuse.targets.mine.corrections]\n'
    'MatMulV2 = 1.2\n\n[tool.npufuse.ops."acc::my_op"]\nengine = "vector"\nfusable = true\nsync_all = false\n'
)
TOML_PIECES = st.sampled_from([
    "[tool]", "[tool.npufuse]", "[tool.npufuse.targets.x]", "[tool.npufuse.ops.\"a::b\"]", "tool = 1",
    "npufuse = []", "targets = 3", "ops = \"x\"", "base = \"a3\"", "base = 5", "engine = \"cube\"", "fusable = 1",
    "memory = {hbm_gbps = -1}", "corrections = {X = 1e400}", "x = 9999999999999999999999", "[[tool.npufuse]]",
    "hbm_gib = 0", "cores = {aic = nan}", "npu_target = \"\"", "\ufeff", "\"\u202e\" = 1",
])


def pyprojects() -> st.SearchStrategy[str]:
    """The valid pyproject with lines dropped, repeated or replaced by other settings of the same tables."""
    lines = PYPROJECT.splitlines()
    return st.lists(st.one_of(st.sampled_from(lines), TOML_PIECES), max_size=24).map("\n".join)


def settings_or_our_error(text: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "pyproject.toml"
        path.write_text(text, encoding="utf-8")
        try:
            config = load_user_config(path)
            for name in getattr(config, "targets", {}):
                config.profile(name)
        except NpufuseError:
            pass


@FUZZ
@given(pyprojects())
def test_any_pyproject_gives_its_settings_or_our_error(text):
    settings_or_our_error(text)


@pytest.mark.parametrize("text", ["tool = 1\n", "[tool]\nnpufuse = 3\n", "[[tool.npufuse.targets]]\nbase = \"a3\"\n",
                                  "[tool.npufuse]\ntargets = [1, 2]\n", "[tool.npufuse]\nops = \"x\"\n"])
def test_a_tool_table_of_the_wrong_type_is_our_error(text):
    settings_or_our_error(text)


ENV_TEXT = st.one_of(
    st.text(max_size=40),
    st.text(alphabet="0123456789+-.eEinfatx_ ", max_size=30),
    st.integers(-(2**70), 2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)
ENV_READERS: dict[str, Callable[[], Any]] = {
    "MAX_RUNTIME_CORE_NUMBER": threads_from_environment,
    "SEED": seed_from_environment,
    "SET_NPU_DEVICE": get_npu_device,
    "HCCL_CONNECT_TIMEOUT": lambda: distributed.connect_timeout_s(None),
    "RANK": lambda: distributed.env_rank(-1, 8),
    "WORLD_SIZE": lambda: distributed.env_rank(0, -1),
    "MASTER_PORT": lambda: distributed.env_int("MASTER_PORT", 1, 65535),
}


@pytest.mark.parametrize("name", sorted(ENV_READERS))
@FUZZ
@given(value=ENV_TEXT)
def test_any_value_of_an_environment_variable_gives_a_value_or_our_error_naming_it(name, value):
    if "\x00" in value:
        value = value.replace("\x00", "")  # the environment cannot hold a NUL
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(name, value)
        try:
            ENV_READERS[name]()
        except NpufuseError as exc:
            assert exc.argument == name or name in exc.problem


ROUTING = st.one_of(
    st.text(max_size=30), st.text(alphabet="zipf:0123456789.-einfa", max_size=12),
    st.lists(st.one_of(st.floats(), st.integers(-(2**70), 2**70), st.text(max_size=3), st.none()), max_size=12),
    st.dictionaries(st.text(max_size=3), st.floats(), max_size=3), st.binary(max_size=8),
)


@FUZZ
@given(ROUTING)
def test_any_routing_argument_gives_a_routing_or_our_error(spec):
    try:
        routing = routing_of(spec)
    except NpufuseError as exc:
        assert exc.argument == "routing"
        return
    for experts in (1, 2, 12):
        try:
            shares = routing.shares(experts)
        except NpufuseError:
            continue
        assert len(shares) == experts and abs(sum(shares) - 1) < 1e-9

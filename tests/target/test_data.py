"""Profiles, the op catalog and SuperKernel options: data in, clear errors out."""

import warnings
from dataclasses import replace

import pytest
import tomllib
import torch

from pytest_npufuse import capture
from pytest_npufuse.errors import OptionsError, ProfileError, UnknownOpWarning
from pytest_npufuse.pipeline.synthetic import ProgramBuilder
from pytest_npufuse.plan.options import parse_options
from pytest_npufuse.target.catalog import load_catalog
from pytest_npufuse.target.profile import (
    BUILTIN_TARGETS,
    DATA_DIR,
    SKU_TARGETS,
    TARGET_ALIASES,
    builtin_profile_text,
    load_profile,
    target_tables,
)
from pytest_npufuse.target.userconfig import load_user_config


def test_builtin_profiles_load_with_cited_numbers():
    a3, a2 = load_profile("a3"), load_profile("a2")
    assert (a3.aic, a3.aiv, a3.cube_mhz) == (24, 48, 1850.0)
    assert a3.superkernel_supported and not a2.superkernel_supported
    assert a2.cube_tflops["bfloat16"] == 353.9
    for path in DATA_DIR.glob("*.toml"):
        if path.name == "ops.toml":
            continue
        numeric = [line for line in path.read_text().splitlines() if "=" in line and line.split("=")[1].strip()[:1].isdigit()]
        assert all("#" in line for line in numeric), f"{path.name}: every number needs a source or 'estimate'"


def test_every_sku_is_a_builtin_target_with_its_own_cores_clock_and_memory():
    """Issue 21: the A2 bins differ among themselves (cores, clock, HBM, L2) and an A3 die is not a
    re-clocked A2; a2 and a3 are aliases of one SKU each and keep their own names."""
    profiles = {name: load_profile(name) for name in SKU_TARGETS}
    assert {name: (p.aic, p.cube_mhz) for name, p in profiles.items()} == {
        "910b1": (24, 1850.0), "910b2": (24, 1800.0), "910b3": (20, 1800.0), "910b4": (20, 1500.0),
        "910c": (24, 1850.0),
    }
    assert profiles["910b4"].hbm_gbps < profiles["910b2"].hbm_gbps / 1.9 and profiles["910b4"].l2_mib == 96
    assert all(p.aicpu == 4 for p in profiles.values())
    b3 = profiles["910b3"].cube_tflops
    assert b3["int8"] == pytest.approx(2 * b3["bfloat16"], abs=0.1)
    for alias, sku in TARGET_ALIASES.items():
        aliased, real = load_profile(alias), profiles[sku]
        assert aliased.name == alias
        assert (aliased.soc, aliased.aic, aliased.cube_mhz) == (real.soc, real.aic, real.cube_mhz)
    assert set(BUILTIN_TARGETS) == {*SKU_TARGETS, "a2", "a3"}


def test_each_target_has_the_device_memory_its_platform_config_gives():
    """hbm_gib is CANN's memory_size for the SoC, as benchmarks/data/skus.toml cites it (32 GiB on 910B4)."""
    skus = tomllib.loads((DATA_DIR.parents[2] / "benchmarks" / "data" / "skus.toml").read_text())
    assert {name: load_profile(name).hbm_gib for name in SKU_TARGETS} == {
        name: skus[name]["hbm_gib"]["value"] for name in SKU_TARGETS
    }
    assert load_profile("910b4").hbm_gib == 32


def test_a_builtin_profile_text_is_one_complete_profile(tmp_path):
    """The architecture file and a SKU file share no table, so their texts together load as a profile."""
    path = tmp_path / "copy.toml"
    path.write_text(builtin_profile_text("910b4"))
    copy = load_profile(str(path))
    assert (copy.name, copy.digest) == ("910b4", load_profile("910b4").digest)


def test_unknown_target_names_the_choices():
    with pytest.raises(ProfileError) as exc:
        load_profile("a5")
    assert exc.value.argument == "target"


def test_malformed_profile_names_file_and_line(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[cores]\naic = \n")
    with pytest.raises(ProfileError) as exc:
        load_profile(str(path))
    assert exc.value.file == str(path) and "line 2" in exc.value.problem


@pytest.mark.parametrize(
    ("line", "replacement", "key"),
    [
        ("aic = 24", 'aic = "twenty-four"', "[cores] aic"),  # expected an integer
        ("sk_sync = 1.5", "", "[overhead_us] sk_sync"),  # missing
        ("supported = true", "supported = 1", "[superkernel] supported"),  # expected a boolean
        ("aic = 24", "aic = 0", "[cores] aic"),  # expected more than zero
        ("cube_mhz = 1850", "cube_mhz = -1850", "[clock] cube_mhz"),
        ("sk_sync = 1.5", "sk_sync = -1.5", "[overhead_us] sk_sync"),  # expected zero or more
        ("latency_us = 0.5", "latency_us = -0.5", "[comm] latency_us"),
    ],
)
def test_bad_key_names_file_key_and_type(tmp_path, line, replacement, key):
    path = tmp_path / "custom.toml"
    path.write_text(builtin_profile_text("a3").replace(line, replacement))
    with pytest.raises(ProfileError) as exc:
        load_profile(str(path))
    assert exc.value.entry == f"{path} {key}"


def test_profile_digest_follows_numbers_not_comments(tmp_path):
    text = builtin_profile_text("910c")
    same, changed = tmp_path / "same.toml", tmp_path / "changed.toml"
    same.write_text(text.replace("# One Atlas A3", "# a comment changed\n# One Atlas A3"))
    changed.write_text(text.replace("dcci_flush = 2.5", "dcci_flush = 2.75"))
    assert load_profile(str(same)).digest == load_profile("910c").digest
    assert load_profile(str(changed)).digest != load_profile("910c").digest


def test_catalog_knows_seed_ops_and_warns_once_for_unknown():
    catalog = load_catalog()
    assert catalog.lookup("npu::npu_quant_matmul").fusable
    assert not catalog.lookup("aten::add").fusable
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = catalog.lookup("acc::my_op")
        catalog.lookup("acc::my_op")
    assert [w.category for w in caught] == [UnknownOpWarning]
    assert "acc::my_op" in str(caught[0].message) and '[tool.npufuse.ops."acc::my_op"]' in str(caught[0].message)
    assert not first.fusable and first.engine == "vector"


def test_catalog_knows_real_code_index_arithmetic_and_slice_writes():
    """Slot -> (block, offset) with // and %, and slice assignment, as real paged-KV and attention code
    does them, are described ops, not unknown ones."""
    catalog = load_catalog()
    ops = ("aten::floor_divide", "aten::remainder", "aten::slice_scatter")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownOpWarning)
        kinds = [catalog.lookup(op).kernel_type for op in ops]
    assert kinds == ["FloorDiv", "FloorMod", "ViewCopy"]


def test_int_mm_is_a_cube_matmul_priced_at_the_int8_rate():
    """``torch._int_mm`` (int8 x int8 -> int32) is described like ``aten::mm``, not an unknown Vector op,
    and a kernel of it does a matmul's work in int8."""
    catalog = load_catalog()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownOpWarning)
        int_mm = catalog.lookup("aten::_int_mm")
    mm = catalog.lookup("aten::mm")
    assert replace(int_mm, op_type="aten::mm") == mm and int_mm.engine == "cube" and int_mm.fusable
    builder = ProgramBuilder(catalog)
    a, b = builder.input("a", (64, 256), "int8"), builder.input("b", (256, 128), "int8")
    builder.op("aten::_int_mm", [a, b], (64, 128), "int32")
    (kernel,) = builder.build().kernels
    assert (kernel.name, kernel.flops, kernel.compute_dtype) == ("MatMulV3", 2 * 64 * 256 * 128, "int8")


def _common_decoder_ops(x, mask):
    """Rope tables, masks, sampling, padding and reductions as decoder code writes them."""
    values, indices = torch.topk(x.masked_fill(mask, -1.0).clamp(-2, 2), 2)
    padded = torch.nn.functional.pad(x, (0, 2))
    extremes = x.max(-1).values + x.min(-1).values + x.amin(-1)
    return (
        torch.cos(x), torch.sin(x), torch.argmax(x, -1), values, indices, padded, torch.cumsum(x, -1), extremes,
        torch.log_softmax(x, -1), torch.triu(x) + torch.tril(x), torch.zeros_like(x), torch.full_like(x, 2),
        x.new_zeros(3), torch.logical_not(mask), torch.erf(x), torch.sign(x), x.repeat(2, 1), 1.0 - x,
        x * torch.tensor([2.0]),
    )


def test_catalog_knows_the_common_aten_ops_of_decoder_code():
    """A real decoder's rope, mask and sampling ops are described ops: none is priced as an unknown."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownOpWarning)
        program = capture(_common_decoder_ops, torch.randn(4, 8), torch.zeros(4, 8, dtype=torch.bool))
    kinds = {kernel.op_type: kernel.info.kernel_type for kernel in program.kernels}
    assert kinds["aten::cos"] == "Cos" and kinds["aten::topk"] == "TopKV2" and kinds["aten::repeat"] == "Tile"
    assert kinds["aten::rsub"] == "Sub" and kinds["aten::constant_pad_nd"] == "PadV3"


def test_user_catalog_entries_are_validated_and_win():
    catalog = load_catalog({"acc::my_op": {"engine": "cube", "fusable": True, "sync_all": False, "block_dim": 8}})
    assert catalog.lookup("acc::my_op").block_dim == 8
    with pytest.raises(ProfileError) as exc:
        load_catalog({"acc::x": {"engine": "gpu", "fusable": True, "sync_all": False, "block_dim": 1}})
    assert exc.value.entry == "[tool.npufuse.ops] [\"acc::x\"] engine"
    with pytest.raises(ProfileError) as exc:
        load_catalog({"my_op": {}})
    assert exc.value.entry == "[tool.npufuse.ops] my_op"
    with pytest.raises(ProfileError) as exc:
        load_catalog({"acc::x": {"engine": "cube", "fusable": "yes", "sync_all": False, "block_dim": 1}})
    assert exc.value.entry == "[tool.npufuse.ops] [\"acc::x\"] fusable"


def test_options_parse():
    parsed = parse_options("sp1", "stream-fusion=1:dcci-before-kernel-start=GroupedMatmul,MoeGatingTopK")
    assert parsed.get("stream-fusion") == "1" and parsed.get("feed-sync-all") == "0"
    assert parse_options("sp1", "").values == {}


@pytest.mark.parametrize(
    ("text", "option"),
    [
        ("stream-fusoin=1", "stream-fusoin"),
        ("stream-fusion=", "stream-fusion"),
        ("stream-fusion=2", "stream-fusion"),
        ("strict-scope-check=warn", "strict-scope-check"),
        ("feed-sync-all=1:feed-sync-all=0", "feed-sync-all"),
        ("debug-aic-num=many", "debug-aic-num"),
        ("dcci-after-kernel-end=A,,B", "dcci-after-kernel-end"),
    ],
)
def test_bad_options_name_scope_option_and_allowed_values(text, option):
    with pytest.raises(OptionsError) as info:
        parse_options("sp1", text)
    assert (info.value.op, info.value.argument) == ("super_kernel", option)
    assert "scope 'sp1'" in str(info.value)


def test_pyproject_partial_override_merges_onto_builtin_and_base_adds_targets(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[tool.npufuse.targets.a3.overhead_us]\nkernel_head = 3.0\n'
        '[tool.npufuse.targets.b4]\nbase = "a2"\ncores = { aic = 20, aiv = 40 }\n'
        '[tool.npufuse.ops."acc::my_op"]\nengine = "cube"\nfusable = true\nsync_all = false\nblock_dim = 8\n'
    )
    user = load_user_config(pyproject)
    a3 = user.profile("a3")
    assert a3.overhead_us["kernel_head"] == 3.0 and a3.overhead_us["sk_sync"] == load_profile("a3").overhead_us["sk_sync"]
    b4 = user.profile("b4")
    assert (b4.name, b4.aic, b4.cube_mhz) == ("b4", 20, load_profile("a2").cube_mhz)
    assert user.catalog().lookup("acc::my_op").block_dim == 8


def test_a_complete_profile_under_a_new_target_name_takes_that_name():
    table = tomllib.loads(builtin_profile_text("a2"))
    assert load_profile("b4", target_tables({"b4": table}, "pyproject.toml")).name == "b4"


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ("[tool.npufuse.targets.a3.overhead_us]\nkernel_haed = 3.0\n", "[targets.a3] [overhead_us] kernel_haed"),
        ("[tool.npufuse.targets.a3.cores]\naic = 2.5\n", "[targets.a3] [cores] aic"),  # expected an integer
        ('[tool.npufuse.targets.x]\nbase = "a9"\n', "[targets.x] base"),  # not a built-in target
        ("[tool.npufuse.targets.a3.clocks]\ncube_mhz = 1\n", "[targets.a3] [clocks]"),  # an unknown section
    ],
)
def test_bad_override_names_file_key_and_type(tmp_path, table, key):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(table)
    with pytest.raises(ProfileError) as info:
        user = load_user_config(pyproject)
        user.profile("a3" if "targets.a3" in table else "x")
    assert info.value.entry.startswith(str(pyproject)) and info.value.entry.endswith(key)

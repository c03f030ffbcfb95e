"""A decode step writes its KV caches with npu_kv_rmsnorm_rope_cache_v2 under npugraph_ex: TorchAir
reinplaces the op, so the caches are written in place and not copied back.

Reconstruction of the call pattern (not a copy) of hicann/cann-recipes-infer,
models/deepseek_r1/models/modeling_deepseek.py @ fbc225d2de3157a093a2e7dfc2b23086d23ed8f9 (the latent
viewed (T, 1, 1, d) and cos/sin (T, 1, 1, rope) into ``npu_kv_rmsnorm_rope_cache_v2(latent, gamma, cos,
sin, slot_mapping.view(-1), rope_cache, nope_cache, epsilon=..., cache_mode="PA_NZ")``, the caches the
step's inputs), with the registration of Ascend/torchair @ fced8842d149f16b587c2c867d427e4b766831ca,
python/torchair/_acl_concrete_graph/graph_pass.py: ``register_inplaceable_npu_op(
"npu_kv_rmsnorm_rope_cache_v2_functional", "npu_kv_rmsnorm_rope_cache_v2", mutated_arg=[5, 6])``, the
``inplaceable_npu_ops`` table that user code also writes its own ops into (a CANN ops package registers
its mla_prolog the same way). The graph is observed with a ``post_grad_custom_post_pass``, which
TorchAir runs after its own passes. Shrunk: four one-token requests, rope 32, kv_lora 64, 3 blocks of 16.

Finding: npugraph_ex (and reduce-overhead) run the registered op in place, so the graph holds
``npu_kv_rmsnorm_rope_cache_v2`` and no ``copy_`` of either cache (each a whole-cache copy per step
otherwise); with ``input_inplace_pass=False``, and in max-autotune, the functional op and its two
write-backs remain. The caches hold the same values either way.
"""

import torch
import torch_npu
from torchair._acl_concrete_graph.graph_pass import InplaceableNpuOp, inplaceable_npu_ops

ROPE, KV_LORA, BLOCKS, BLOCK_SIZE, TOKENS = 32, 64, 3, 16, 4
EPS = 1e-6


class CacheWrite(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.kv_a_layernorm = torch.nn.Parameter(torch.ones(KV_LORA, dtype=torch.bfloat16), requires_grad=False)

    def forward(self, latent_cache, cos, sin, slot_mapping, nope_cache, rope_cache):
        num_tokens = latent_cache.shape[0]
        latent_cache = latent_cache.view(num_tokens, 1, 1, KV_LORA + ROPE)
        cos = cos.view(-1, 1, 1, ROPE)
        sin = sin.view(-1, 1, 1, ROPE)
        torch_npu.npu_kv_rmsnorm_rope_cache_v2(
            latent_cache, self.kv_a_layernorm, cos, sin, slot_mapping.view(-1), rope_cache, nope_cache,
            epsilon=EPS, cache_mode="PA_NZ",
        )
        return nope_cache.sum() + rope_cache.sum()


def step_inputs():
    gen = torch.Generator().manual_seed(7)
    latent = torch.randn(TOKENS, KV_LORA + ROPE, generator=gen).bfloat16().npu()
    angles = torch.rand(TOKENS, ROPE, generator=gen) * 3
    slot_mapping = torch.tensor([[2], [17], [30], [41]], dtype=torch.int64).npu()
    nope_cache = torch.zeros(BLOCKS, BLOCK_SIZE, 1, KV_LORA, dtype=torch.bfloat16).npu()
    rope_cache = torch.zeros(BLOCKS, BLOCK_SIZE, 1, ROPE, dtype=torch.bfloat16).npu()
    return latent, angles.cos().bfloat16().npu(), angles.sin().bfloat16().npu(), slot_mapping, nope_cache, rope_cache


def targets_seen(seen):
    def post_pass(gm, example_inputs, config):
        seen.extend(str(node.target) for node in gm.graph.nodes if node.op == "call_function")

    return post_pass


def run(backend_options):
    seen = []
    inputs = step_inputs()
    torch._dynamo.reset()
    compiled = torch.compile(CacheWrite().npu(), backend="npugraph_ex", options={**backend_options, "post_grad_custom_post_pass": targets_seen(seen)})
    return compiled(*inputs), inputs, seen


def test_torchairs_registration_is_the_table_user_code_writes_to():
    entry = inplaceable_npu_ops[torch.ops.npu.npu_kv_rmsnorm_rope_cache_v2_functional.default]
    assert isinstance(entry, InplaceableNpuOp) and entry.mutated_arg == [5, 6]
    assert entry.inplace_op is torch.ops.npu.npu_kv_rmsnorm_rope_cache_v2.default


def test_npugraph_ex_writes_the_caches_in_place_without_copying_them_back():
    expected = step_inputs()
    CacheWrite().npu()(*expected)
    out, inputs, seen = run({})
    assert "npu.npu_kv_rmsnorm_rope_cache_v2.default" in seen
    assert not any("copy" in target for target in seen)
    assert torch.equal(inputs[4], expected[4]) and torch.equal(inputs[5], expected[5])
    assert torch.equal(out, expected[4].sum() + expected[5].sum())


def test_without_the_input_inplace_pass_the_functional_op_and_two_write_backs_remain():
    in_place, _, _ = run({})
    out, _, seen = run({"input_inplace_pass": False})
    assert "npu.npu_kv_rmsnorm_rope_cache_v2_functional.default" in seen and seen.count("aten.copy_.default") == 2
    assert torch.equal(out, in_place)

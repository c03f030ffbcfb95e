"""SuperKernel scopes around views and elementwise ops (TorchAir's view-optimisation tests).

Reconstruction of the call patterns (not copies) of
Ascend/torchair, tests/smoke/ge_test.py @ fced8842d149f16b587c2c867d427e4b766831ca: two sibling scopes
``super_kernel("scope1", "")`` / ``super_kernel("scope2", "")`` with a transpose between them, an outer
scope holding an inner one, and three nested levels; ``CompilerConfig().mode = "max-autotune"`` with
``experimental_config.enable_view_optimize = True`` in the originals (the attribute path needs the shim's
CompilerConfig tree; the check runs max-autotune). Same shapes as the tests (a 64-element fp32 vector).
"""

import pytest
import torch
import torchair


class SiblingScopes(torch.nn.Module):
    def forward(self, x):
        with torchair.scope.super_kernel("scope1", ""):
            r1 = x.view(2, 32) + 1
        t1 = r1.transpose(0, 1)
        with torchair.scope.super_kernel("scope2", ""):
            r2 = t1.reshape(64) * 2
        return r2


class NestedScopes(torch.nn.Module):
    def forward(self, x):
        v1 = x.view(2, 32)
        with torchair.scope.super_kernel("outer_scope", ""):
            t1 = v1.transpose(0, 1)
            with torchair.scope.super_kernel("inner_scope", ""):
                r1 = t1.reshape(64) + 1
            r2 = r1.view(8, 8) * 2
        return r2


class ThreeLevels(torch.nn.Module):
    def forward(self, x):
        v1 = x.view(2, 32)
        with torchair.scope.super_kernel("level_1", ""):
            t1 = v1.transpose(0, 1)
            with torchair.scope.super_kernel("level_2", ""):
                v2 = t1.reshape(64)
                with torchair.scope.super_kernel("level_3", ""):
                    r1 = v2.view(8, 8) + 1
                r2 = r1 * 2
            r3 = r2 - 1
        return r3


def vector():
    return torch.randn(64, generator=torch.Generator().manual_seed(1)).npu()


def test_view_optimize_config_is_accepted():
    config = torchair.CompilerConfig()
    config.mode = "max-autotune"
    config.experimental_config.enable_view_optimize = True
    assert config.experimental_config.enable_view_optimize


@pytest.mark.parametrize("model", [SiblingScopes, NestedScopes, ThreeLevels])
def test_scopes_around_views(npufuse, model):
    report = npufuse.check(model(), vector())
    assert report.bit_exact

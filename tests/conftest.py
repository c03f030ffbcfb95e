"""Shared set-up for the plugin's own tests.

``pytester`` runs nested pytest sessions in this process and afterwards forgets every module first
imported during them. torch imports much of Dynamo lazily on the first compile, and re-importing it
registers its backends twice, so one small compile happens here, before any nested session. The
reference kernels are imported here for the same reason: a second import would define the ``npu``
ops again.
"""

import torch

from pytest_npufuse import compare, torch_npu, torchair  # noqa: F401 - torch_npu: see above


class _Warm(torch.nn.Module):
    def forward(self, x):
        with torchair.scope.super_kernel("warm", ""):
            return x @ x


compare(_Warm(), torch.ones(2, 2))

"""``torch_npu.testing``: the helpers torch_npu's own op tests are written with, so that those tests (and a
team's tests written the same way) run unchanged on the CPU model.

Upstream's modules (Ascend/pytorch ``torch_npu/testing/``) are reproduced by behaviour, not copied:

* :mod:`.testcase` - ``TestCase`` (``assertRtolEqual``, torch_npu's ``assertEqual``) and ``run_tests``;
* :mod:`.common_utils` - ``SupportedDevices``, ``SkipIfNotGteCANNVersion``, ``create_common_tensor``,
  ``create_dtype_tensor``, ``get_npu_device``;
* :mod:`.decorator` - ``Dtypes``, ``Formats``, ``instantiate_tests``;
* :mod:`.common_distributed` - ``skipIfUnsupportMultiNPU`` (the model has one NPU, so tests that need
  more skip and say so).

Upstream's package ``__init__`` also rewires PyTorch's OpInfo test machinery for the NPU device; the
model runs no OpInfo suites, so this package imports nothing at import time.
"""

__all__: list[str] = []

"""npugraph_ex's ``CompilerConfig``: one flat set of options, the same keys ``torch.compile(model,
backend="npugraph_ex", options={...})`` takes.

npugraph_ex is TorchAir's successor backend, shipped as its own package (torchair:
npugraph_ex/npugraph_ex/configs/compiler_config.py, snapshot fced8842). Its options are TorchAir's aclgraph
options under flat names, so each one is a path of TorchAir's ``CompilerConfig`` tree
(``TORCHAIR_PATHS`` of :mod:`pytest_npufuse.torchair.configs.npugraphex_config`, where TorchAir keeps it) and
the model honours exactly what it honours there: the SuperKernel options, and ``dump_tensor_data`` (the
data dump is written, see :mod:`pytest_npufuse.torchair.dump`). The options with no TorchAir path
(``capture_error_mode``, ``force_recapture``, ``deadlock_check``, ...) steer how a device captures and
replays the graph, which changes nothing a CPU model can observe; they are checked and recorded.
"""

from __future__ import annotations

import difflib
import os
from typing import Any, Mapping

from ...errors import ConfigError
from ...torchair.configs.compiler_config import CompilerConfig as TorchairConfig
from ...torchair.configs._options import ConfigNode, OptionValue, callable_or_none, int_range, of_type
from ...torchair.configs.npugraphex_config import TORCHAIR_PATHS, set_option

__all__ = ["CompilerConfig"]

INT64_MAX = 2**63 - 1
_BOOL = [True, False]



def _existing_dir(value: Any) -> str:
    """npugraph_ex's ``data_dump_dir`` must name a directory that exists."""
    if not isinstance(value, str) or not os.path.isdir(value):
        return f"Please set legal dir path, {value} is not found or is not a file directory!"
    return ""


def _int_list(value: Any) -> str:
    if value is not None and not (isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value)):
        return f"the set value must be an int list or None, got {value!r}"
    return ""


class Option(OptionValue):
    """npugraph_ex's option: its ``value`` is text as TorchAir's, but a boolean stays a boolean
    (npugraph_ex: configs/_option_base.py)."""

    BOOLS_AS_TEXT = False


class CompilerConfig(ConfigNode):
    """npugraph_ex's options with their defaults and value rules; ``torchair_config()`` is the TorchAir
    config the backend models it by."""

    def __init__(self) -> None:
        super().__init__(
            "CompilerConfig",
            force_eager=Option(False, _BOOL),
            use_graph_pool=None,
            reuse_graph_pool_in_same_fx=Option(True, _BOOL),
            capture_limit=Option(64, check=int_range(1, INT64_MAX)),
            clone_input=Option(True, _BOOL),
            clone_output=Option(False, _BOOL),
            disable_static_kernel_compile_cache=Option(False, _BOOL),
            static_kernel_compile=Option(False, _BOOL),
            frozen_parameter=Option(False, _BOOL),
            remove_noop_ops=Option(True, _BOOL),
            remove_cat_ops=Option(True, _BOOL),
            inplace_pass=Option(True, _BOOL),
            input_inplace_pass=Option(True, _BOOL),
            pattern_fusion_pass=Option(True, _BOOL),
            post_grad_custom_pre_pass=Option(None, check=callable_or_none, text=False),
            post_grad_custom_post_pass=Option(None, check=callable_or_none, text=False),
            dump_tensor_data=Option(False, _BOOL),
            data_dump_stage=Option("optimized", ["original", "optimized"]),
            data_dump_dir=Option("./", check=_existing_dir),
            _vllm_aclnn_static_kernel_sym_index=Option(0, check=int_range(0, INT64_MAX)),
            _vllm_aclnn_static_kernel_sym_range=Option(None, check=_int_list, text=False),
            super_kernel_optimize=Option(False, _BOOL),
            super_kernel_optimize_options=Option(None, check=of_type(dict), text=False),
            super_kernel_debug_options=Option(None, check=of_type(dict), text=False),
            deadlock_check=Option(False, _BOOL),
            capture_error_mode=Option("global", ["global", "thread_local", "relaxed"]),
            mode=Option("npugraph_ex", ["npugraph_ex"]),
            force_recapture=Option(False, _BOOL),
        )

    def update(self, options: Mapping[str, Any] | None) -> "CompilerConfig":
        """Set the ``options={...}`` of ``torch.compile(backend="npugraph_ex")``, each checked as npugraph_ex
        checks it; a key that is no option is npugraph_ex's ValueError listing the options. Returns self."""
        for name, value in (options or {}).items():
            if name not in self._children:
                near = difflib.get_close_matches(name, list(self._children), n=1)
                raise ConfigError(
                    f"Invalid option '{name}'{f' (did you mean {near[0]!r}?)' if near else ''}. The 'CompilerConfig' "
                    f"object does not have attribute '{name}'. Supported attributes are: {sorted(self._children)}",
                    argument=name
                )
            setattr(self, name, value)
        return self

    def as_dict(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(local options, global options) as npugraph_ex reports them: every option that is set, by name."""
        local = {
            name: child.raw if isinstance(child, OptionValue) else child
            for name, child in self._children.items()
        }
        return {name: value for name, value in local.items() if value is not None}, {}

    def torchair_config(self) -> TorchairConfig:
        """The TorchAir ``CompilerConfig`` in npugraph_ex mode with every mapped option set."""
        config = TorchairConfig()
        config.mode = "npugraph_ex"
        for name in TORCHAIR_PATHS:
            child = self._children[name]
            value = child.raw if isinstance(child, OptionValue) else child
            if isinstance(child, OptionValue) and value == child.default:
                continue
            set_option(config, name, value)
        return config

    def __repr__(self) -> str:
        return f"npugraph_ex.CompilerConfig({self.leaves()})"


def options_config(options: Mapping[str, Any] | None) -> TorchairConfig:
    """The TorchAir config an npugraph_ex ``options={...}`` dict stands for."""
    return CompilerConfig().update(options).torchair_config()


def _process_kwargs_options(config: CompilerConfig, kwargs: Mapping[str, Any]) -> None:
    """npugraph_ex's own spelling of :meth:`CompilerConfig.update` for the ``options`` entry of a
    ``torch.compile`` call's ``kwargs`` (npugraph_ex: configs/compiler_config.py)."""
    config.update(kwargs.get("options"))

"""The bundled full-size models: each public config with the builder and the decode deployment of its
public Ascend recipe, for the cases and the full-size benchmark.

    model, inputs = DEEPSEEK_V3_CASE.build()        # under init_empty_weights(): nothing allocated
    report = compare(model, *inputs)               # timing only, every layer priced at its real size
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping

import torch

from pytest_npufuse import init_empty_weights

from . import configs, deepseek_v3, gqa, llama3, qwen3_moe


@dataclass(frozen=True)
class FullSize:
    """A public model at its real size: ``config`` (HF ``config.json`` values), the ``deployment`` one rank
    runs, the model ``builder`` and its decode-step ``inputs``."""

    name: str
    config: Mapping[str, Any]
    deployment: configs.Deployment
    builder: Callable[[Mapping[str, Any], configs.Deployment], torch.nn.Module]
    inputs: Callable[[Mapping[str, Any], configs.Deployment], tuple[Any, ...]]

    @property
    def layers(self) -> int:
        return self.config["num_hidden_layers"]

    def build(self) -> tuple[torch.nn.Module, tuple[Any, ...]]:
        """The model with its parameters on the meta device, and one decode step's inputs."""
        with init_empty_weights():
            model = self.builder(self.config, self.deployment)
        return model, self.inputs(self.config, self.deployment)

    def resized(self, name: str, **config: Any) -> "FullSize":
        """The same model family and deployment with some config values changed (e.g. fewer layers)."""
        return replace(self, name=name, config={**self.config, **config})


DEEPSEEK_V3_CASE = FullSize("deepseek-v3", configs.DEEPSEEK_V3, configs.DEEPSEEK_V3_DECODE, deepseek_v3.DeepseekV3,
                            deepseek_v3.decode_inputs)
QWEN3_235B_CASE = FullSize("qwen3-235b-a22b", configs.QWEN3_235B_A22B, configs.QWEN3_235B_DECODE, qwen3_moe.Qwen3Moe,
                           gqa.decode_inputs)
LLAMA_3_70B_CASE = FullSize("llama-3-70b", configs.LLAMA_3_70B, configs.LLAMA_3_70B_DECODE, llama3.Llama3,
                            gqa.decode_inputs)
BUNDLED = (DEEPSEEK_V3_CASE, QWEN3_235B_CASE, LLAMA_3_70B_CASE)

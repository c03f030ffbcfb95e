"""``torchair.patterns.pattern_pass_manager``: a user's own operator-fusion rules, applied to each aten graph.

``register_replacement(search_fn, replace_fn, example_inputs, ...)`` registers a rule with PyTorch's
pattern matcher; every graph captured afterwards, by a check or by TorchAir's backend, has each match of
``search_fn`` replaced by ``replace_fn``'s ops (:mod:`pytest_npufuse.frontend.rewrites` keeps the rules).
As in TorchAir (Ascend/torchair docs/zh/context/register_replacement.md and FX图算子融合Pass配置.md, commit
fced8842): the rules run in every mode, after the config's ``post_grad_custom_pre_pass``, unless
``experimental_config.pattern_fusion_pass`` (npugraph_ex: ``pattern_fusion_pass``) is False; a match whose
ops run on more than one stream is never fused; ``extra_check(match)`` may refuse a match.

npugraph_ex's ``register_replacement`` registers into the same rules here, since the model compiles
npugraph_ex through TorchAir's config.
"""

from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch.fx

from ...frontend.rewrites import add_rule, pattern_matcher

if TYPE_CHECKING:
    from torch._inductor.pattern_matcher import Match

__all__ = ["register_replacement"]


def fwd_only(fn: Callable[..., Any], args: Sequence[Any], **kwargs: Any) -> torch.fx.GraphModule:
    """PyTorch's ``fwd_only`` tracer (an inference graph of ``fn``), TorchAir's default ``trace_fn``."""
    with pattern_matcher() as matcher:
        return matcher.fwd_only(fn, args, **kwargs)


def _return_true(match: "Match") -> bool:
    """The default ``extra_check``: every match is fused."""
    return True


def register_replacement(search_fn, replace_fn, example_inputs, trace_fn=fwd_only, extra_check=_return_true,
                         search_fn_pattern=None, scalar_workaround=None, skip_duplicates=False):
    """Replace every match of ``search_fn`` in a compiled graph by ``replace_fn`` (both traced with
    ``example_inputs`` by ``trace_fn``), when ``extra_check(match)`` holds and the match's ops share one
    stream. The parameters carry no annotations: this is TorchAir's public signature as its API schema
    records it."""
    add_rule(search_fn, replace_fn, example_inputs, trace_fn, extra_check, search_fn_pattern=search_fn_pattern,
             scalar_workaround=scalar_workaround, skip_duplicates=skip_duplicates)


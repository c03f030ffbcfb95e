"""``torchair.patterns.pattern_pass_manager``: a user's own operator-fusion rules, applied to each aten graph.

``register_replacement(search_fn, replace_fn, example_inputs, ...)`` registers a rule with PyTorch's
pattern matcher (``torch._inductor.pattern_matcher.register_replacement``); after a graph is captured and
lowered to aten, every subgraph that matches ``search_fn`` is replaced by ``replace_fn``'s ops, so the
model plans, checks and prices the fused op the rule puts in, as the device would run it. As in TorchAir
(Ascend/torchair docs/zh/context/register_replacement.md and FX图算子融合Pass配置.md, commit fced8842):
the rules run in every mode, after the config's ``post_grad_custom_pre_pass``, unless
``experimental_config.pattern_fusion_pass`` (npugraph_ex: ``pattern_fusion_pass``) is False; a match whose
ops run on more than one stream is never fused; ``extra_check(match)`` may refuse a match.

npugraph_ex's ``register_replacement`` registers into the same rules here, since the model compiles
npugraph_ex through TorchAir's config.
"""

from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch.fx

from .._reinplace import STREAM_LABEL_META, label_streams

if TYPE_CHECKING:
    from torch._inductor.pattern_matcher import Match

__all__ = ["register_replacement"]

# The rules: at most one PatternMatcherPass, made with the first rule (importing PyTorch's pattern matcher
# takes seconds, which ``import torchair`` should not pay when no rule is registered).
_RULES: list[Any] = []


def fwd_only(fn: Callable[..., Any], args: Sequence[Any], **kwargs: Any) -> torch.fx.GraphModule:
    """PyTorch's ``fwd_only`` tracer (an inference graph of ``fn``), TorchAir's default ``trace_fn``;
    imported when first used, for the reason above."""
    from torch._inductor.pattern_matcher import fwd_only as trace

    return trace(fn, args, **kwargs)


def _return_true(match: "Match") -> bool:
    """The default ``extra_check``: every match is fused."""
    return True


def _on_one_stream(match: "Match") -> bool:
    """Whether every op of ``match`` runs on one stream (TorchAir never fuses across streams: the fused op
    would lose the cross-stream order the user asked for)."""
    streams = {node.meta.get(STREAM_LABEL_META) for node in match.nodes if node.op == "call_function"}
    return len(streams) <= 1


def register_replacement(search_fn, replace_fn, example_inputs, trace_fn=fwd_only, extra_check=_return_true,
                         search_fn_pattern=None, scalar_workaround=None, skip_duplicates=False):
    """Replace every match of ``search_fn`` in a compiled graph by ``replace_fn`` (both traced with
    ``example_inputs`` by ``trace_fn``), when ``extra_check(match)`` holds and the match's ops share one
    stream. The parameters carry no annotations: this is TorchAir's public signature as its API schema
    records it."""
    from torch._inductor.pattern_matcher import PatternMatcherPass
    from torch._inductor.pattern_matcher import register_replacement as register

    if not _RULES:
        _RULES.append(PatternMatcherPass(pass_name="torchair_generic_pattern_pass"))
    register(
        search_fn=search_fn,
        replace_fn=replace_fn,
        example_inputs=example_inputs,
        trace_fn=trace_fn,
        pass_dicts=_RULES[0],
        extra_check=lambda match: _on_one_stream(match) and extra_check(match),
        search_fn_pattern=search_fn_pattern,
        scalar_workaround=scalar_workaround,
        skip_duplicates=skip_duplicates,
    )


def apply_replacements(gm: torch.fx.GraphModule) -> None:
    """Apply every registered rule to ``gm`` in place (after its nodes are labelled with their streams)."""
    for rules in _RULES:
        label_streams(gm)
        rules.apply(gm.graph)

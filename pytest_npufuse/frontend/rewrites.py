"""A user's own operator-fusion rules (TorchAir's and npugraph_ex's ``register_replacement``), kept here so
every capture applies them: ``npufuse.check``/``compare`` as well as a ``torch.compile`` through TorchAir's
backend.

A rule goes to PyTorch's pattern matcher (``torch._inductor.pattern_matcher.register_replacement``); after a
graph is lowered to aten, every subgraph that matches its ``search_fn`` is replaced by its ``replace_fn``'s
ops, so the model plans, checks and prices the fused op, as the device would run it. As in TorchAir
(Ascend/torchair docs/zh/context/register_replacement.md and FX图算子融合Pass配置.md, commit fced8842): a
match whose ops run on more than one stream is never fused, and ``extra_check(match)`` may refuse a match.
"""

from __future__ import annotations

import contextlib
import warnings
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import torch.fx

from .scopes import STREAM_LABEL_META, label_streams

if TYPE_CHECKING:
    from torch._inductor.pattern_matcher import Match

# The rules: at most one PatternMatcherPass, made with the first rule (importing PyTorch's pattern matcher
# takes seconds, which a capture should not pay when no rule is registered). Declarations, as TorchAir's
# process-wide ones are: a rule is registered once, at a module's import, not per check (not session state).
_RULES: list[Any] = []


@contextlib.contextmanager
def pattern_matcher() -> Iterator[ModuleType]:
    """PyTorch's pattern matcher, imported when first used (for the reason above). It and the inductor
    passes it imports on its first trace use ``torch.jit.script_method``, whose deprecation warning is about
    torch's own code, not the user's: inside this block it is not passed on."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.script_method` is deprecated", category=DeprecationWarning)
        import torch._inductor.pattern_matcher as matcher

        yield matcher


def _on_one_stream(match: "Match") -> bool:
    """Whether every op of ``match`` runs on one stream (TorchAir never fuses across streams: the fused op
    would lose the cross-stream order the user asked for)."""
    streams = {node.meta.get(STREAM_LABEL_META) for node in match.nodes if node.op == "call_function"}
    return len(streams) <= 1


def add_rule(
    search_fn: Callable[..., Any], replace_fn: Callable[..., Any], example_inputs: Sequence[Any],
    trace_fn: Callable[..., torch.fx.GraphModule], extra_check: Callable[["Match"], bool], **options: Any,
) -> None:
    """Replace every match of ``search_fn`` by ``replace_fn`` (both traced with ``example_inputs`` by
    ``trace_fn``) in every graph captured from now on, when ``extra_check(match)`` holds and the match's ops
    share one stream. ``options`` are the pattern matcher's own (``search_fn_pattern``, ...)."""
    with pattern_matcher() as matcher:
        if not _RULES:
            _RULES.append(matcher.PatternMatcherPass(pass_name="torchair_generic_pattern_pass"))
        matcher.register_replacement(
            search_fn=search_fn, replace_fn=replace_fn, example_inputs=example_inputs, trace_fn=trace_fn,
            pass_dicts=_RULES[0], extra_check=lambda match: _on_one_stream(match) and extra_check(match), **options,
        )


def apply_rules(gm: torch.fx.GraphModule, example_inputs: Sequence[Any] = ()) -> None:
    """Apply every registered rule to ``gm`` in place, its nodes labelled with their streams first (a graph
    pass: ``example_inputs`` are not needed)."""
    for rules in _RULES:
        label_streams(gm)
        rules.apply(gm.graph)

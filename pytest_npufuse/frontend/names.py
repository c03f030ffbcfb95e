"""What the user calls a tensor: the variable or expression of the source line that made it.

A message about a tensor ("a race on ...") must use the user's words, never an FX node name such as
``getitem_3``. Each node's stack trace names the user's line and, since Python 3.11, marks with carets
the expression being evaluated (``hidden @ self.w``). That expression is the tensor's name, unless it
is the whole value of an assignment: then it is the assigned variable (``out = x @ w`` names ``out``;
``normed, _ = npu_rms_norm(...)`` names the first output ``normed``). Nodes a decomposition made from
one expression (RMSNorm's pow, mean and rsqrt) share its trace; only the last, whose value leaves the
expression, carries its name; the others are named by their op inside it.
"""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import torch.fx

from .source import is_user_path

# One frame of a formatted traceback: its file and line, the code line, and an optional caret line.
_FRAME = re.compile(r'  File "([^"]+)", line (\d+), in [^\n]*\n    ([^\n]*)\n(?:    ([ ~^]*[~^][ ~^]*)\n)?')


@dataclass(frozen=True)
class Expression:
    """The expression a node evaluates on the user's line: its text and, when it is an assignment's
    whole value, the assigned targets (one name per element of a tuple target)."""

    text: str
    targets: tuple[str, ...] = ()
    tuple_target: bool = False

    def name(self, index: int | None) -> str:
        """The user's name of this expression's value, or of its ``index``-th element for a tuple
        result; ``_`` or a missing target falls back to the expression subscripted."""
        if self.targets and not self.tuple_target and index is None:
            return self.targets[0]
        if self.tuple_target and index is not None and index < len(self.targets) and self.targets[index] != "_":
            return self.targets[index]
        return self.text if index is None else f"({self.text})[{index}]"


def _assigned(statement: ast.stmt) -> tuple[ast.expr | None, list[ast.expr]]:
    """The value and targets of an assignment statement (none for any other statement)."""
    if isinstance(statement, ast.Assign):
        return statement.value, statement.targets
    if isinstance(statement, (ast.AnnAssign, ast.AugAssign)):
        return statement.value, [statement.target]
    return None, []


def _statement(code: str) -> ast.stmt | None:
    """The statement of one source line; a compound statement's header (``with ...:``) gets a body."""
    for text in (code, f"{code}\n    pass"):
        try:
            body = ast.parse(text).body
        except SyntaxError:
            continue
        return body[0] if body else None
    return None


# Python operators as the aten ops they lower to (the op's name without namespace and overload).
_OPERATORS = {
    ast.MatMult: ("mm", "bmm", "matmul", "addmm", "baddbmm"), ast.Add: ("add",), ast.Sub: ("sub", "rsub"),
    ast.Mult: ("mul",), ast.Div: ("div",), ast.FloorDiv: ("floor_divide", "div"), ast.Pow: ("pow",),
    ast.Mod: ("remainder", "fmod"), ast.USub: ("neg",), ast.Invert: ("bitwise_not",),
    ast.BitAnd: ("bitwise_and",), ast.BitOr: ("bitwise_or",), ast.BitXor: ("bitwise_xor",),
}
_COMPUTING = (ast.Call, ast.BinOp, ast.UnaryOp, ast.Subscript, ast.Compare)


def _is_op(node: ast.expr, op: str) -> bool:
    """Whether the Python expression ``node`` is a call of, or an operator lowering to, ``op``."""
    name = op.split("::")[-1].split(".")[0].rstrip("_")
    if isinstance(node, ast.Call):
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        return called.rstrip("_") == name
    operator_ = getattr(node, "op", None)
    return name in _OPERATORS.get(type(operator_), ())


def _chosen(candidates: list[ast.expr], end: int, op: str) -> ast.expr:
    """The expression among those starting at the caret that is ``op`` (Dynamo's end column is not
    reliable: it may run to the end of the line), else the one ending at the caret's end, else the
    innermost."""
    for test in (lambda n: _is_op(n, op), lambda n: n.end_col_offset == end):
        matching = [n for n in candidates if test(n)]
        if matching:
            return min(matching, key=lambda n: n.end_col_offset)
    return min(candidates, key=lambda n: n.end_col_offset)


@lru_cache(maxsize=4096)
def expression_of(code: str, start: int, end: int, op: str = "") -> Expression:
    """The expression of one stripped source line that starts at column ``start`` (the caret's start;
    ``end`` its end) and computes ``op``, with the targets it is assigned to when it is the statement's
    whole value. Without a parsable statement, the marked text."""
    statement = _statement(code)
    if statement is None:
        return Expression(code[start:end].strip())
    value, targets = _assigned(statement)
    if value is not None and start == 0 and end == len(code):
        start, end = value.col_offset, value.end_col_offset  # no carets: the statement's whole value
    candidates = [n for n in ast.walk(statement) if isinstance(n, _COMPUTING) and n.col_offset == start]
    chosen = _chosen(candidates, end, op) if candidates else None
    text = ast.get_source_segment(code, chosen) if chosen is not None else code[start:end].strip()
    if chosen is None or chosen is not value or not targets:
        return Expression(text)
    target = targets[0]
    if isinstance(target, (ast.Tuple, ast.List)):
        return Expression(text, tuple(ast.unparse(element) for element in target.elts), tuple_target=True)
    return Expression(text, (ast.unparse(target),))


@lru_cache(maxsize=4096)
def user_expression(trace: str, op: str = "") -> Expression | None:
    """The expression computing ``op`` in the innermost user frame of a formatted stack trace (None
    without one). A frame without carets is one whose expression is its whole line or value (Python
    prints none then)."""
    frames = [match for match in _FRAME.finditer(trace) if is_user_path(match.group(1))]
    if not frames:
        return None
    _, _, code, carets = frames[-1].groups()
    if not carets:
        return expression_of(code, 0, len(code), op)
    marked = [i for i, char in enumerate(carets) if char in "~^"]
    return expression_of(code, marked[0], marked[-1] + 1, op)


def _expression(node: torch.fx.Node, op_of: Callable[[torch.fx.Node], str]) -> Expression | None:
    return user_expression(node.meta.get("stack_trace") or "", op_of(node))


def _intermediate(node: torch.fx.Node, expression: Expression, op_of: Callable[[torch.fx.Node], str]) -> bool:
    """Whether ``node`` only feeds the rest of the same expression (a decomposition's step): every user
    evaluates that expression too, and none is an output."""
    return bool(node.users) and all(
        user.op != "output" and user.target is not operator.getitem and _expression(user, op_of) == expression
        for user in node.users
    )


INPUT_NAMES = "npufuse_input_names"
"""``gm.meta`` key of an aten graph: placeholder name -> what the user's code calls that input
(:func:`input_names`)."""

# Dynamo's spelling of a module's members in a source name: ``._parameters['w']`` is ``.w`` to the user.
_MEMBER = re.compile(r"\._(?:parameters|buffers|modules)\['(\w+)'\]")
# A local or global of the compiled frame: ``L['x']`` is ``x``.
_FRAME_NAME = re.compile(r"\b[LG]\['(\w+)'\]")


def source_name(source: str) -> str:
    """The user's spelling of a Dynamo source name: ``L['self']._parameters['w']`` -> ``self.w``."""
    return _FRAME_NAME.sub(r"\1", _MEMBER.sub(r".\1", source))


def input_names(dynamo_gm: torch.fx.GraphModule) -> tuple[str, ...]:
    """What the user's code calls each input of a Dynamo graph, in placeholder order ('' where Dynamo
    recorded no source): the forward's argument (``cache``) or the module member (``self.w``)."""
    names = []
    for node in dynamo_gm.graph.nodes:
        if node.op == "placeholder":
            argument = node.meta.get("grapharg")
            names.append(source_name(argument.source.name) if argument is not None and argument.source else "")
    return tuple(names)


def note_input_names(gm: torch.fx.GraphModule, names: tuple[str, ...]) -> None:
    """Record on the aten graph ``gm`` the user's name of each placeholder: AOTAutograd keeps the Dynamo
    graph's flat inputs in order, so they are matched by position; nothing when the counts differ (an
    input AOT added, such as an effect token)."""
    placeholders = [node.name for node in gm.graph.nodes if node.op == "placeholder"]
    if len(placeholders) == len(names):
        gm.meta[INPUT_NAMES] = {node: name for node, name in zip(placeholders, names) if name}


def tensor_label(node: torch.fx.Node, op_of: Callable[[torch.fx.Node], str]) -> str:
    """The user's name for the tensor ``node`` computes (``op_of`` gives a node's op type, also the
    fallback): the variable or expression of its source line, or ``<op> in `expr``` for a
    decomposition's intermediate; the op's name when the node has no user line; for a graph input, the
    name :func:`note_input_names` recorded ('' without one)."""
    if node.op == "placeholder":
        return node.graph.owning_module.meta.get(INPUT_NAMES, {}).get(node.name, "") if node.graph.owning_module else ""
    if node.op == "get_attr":
        return ""
    index = node.args[1] if node.target is operator.getitem and isinstance(node.args[1], int) else None
    made_by = node.args[0] if index is not None and isinstance(node.args[0], torch.fx.Node) else node
    expression = _expression(made_by, op_of)
    if expression is None:
        return f"the output of {op_of(made_by)}"
    if index is None and _intermediate(node, expression, op_of):
        return f"{op_of(node)} in `{expression.text}`"
    return expression.name(index)

"""The one place a torch_npu op is declared: schema, argument checks, CPU kernel, fake kernel, catalog entry.

An op's signature is stated once, as data: torch_npu's schema in ``schemas.toml`` (:mod:`.schema`). Its
behaviour is the function of that name decorated with :func:`npu_op`, holding the op's docstring and the
checks that need no tensor metadata beyond the schema's types (scalar ranges, modes), plus two functions
the decorator takes. Each call is bound against the schema's signature into one :class:`Arguments`
record, which all three take:

* ``checks`` (the decorated function) refuses what the schema's types allow but the op does not;
* ``meta`` validates tensor metadata (shapes, dtypes) and returns the outputs as :class:`Out` specs;
* ``kernel`` computes the outputs on CPU.

The decorator returns the public callable, with torch_npu's ``inspect.signature``, the docstring, name
and module of the decorated function: it checks every argument against its schema type (an error naming
the argument, not a dispatcher traceback), then runs the op.
From these it defines ``torch.ops.npu.<name>`` with torch_npu's schema (keyword-only markers included, so
traced graphs carry the same arguments as with the real torch_npu; ``torch.library.custom_op`` cannot
express keyword-only tensors, hence a FRAGMENT library), registers a CPU kernel (checks, meta, kernel,
and a check that the result matches the meta) and a fake kernel (checks, meta, empty outputs), and
verifies that the op catalog (``data/ops.toml``) has an entry for ``npu::<name>``.

Where the checks run: called eagerly, the public callable runs them all (fit, types, the op's checks) and
the CPU kernel the metadata checks. While Dynamo traces, the public callable checks only that the call
fits and each argument's type, because the dispatcher converts scalars before any kernel sees them
(``out_flag=1`` reaches the fake kernel as True); the fake kernel runs the op's checks and the metadata
checks. Tracing the record and every check twice per call would multiply a large model's capture time.
"""

from __future__ import annotations

import functools
import inspect
import sys
from dataclasses import dataclass, field, make_dataclass
from types import MappingProxyType
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import numpy
import torch
from torch._subclasses.functional_tensor import CppFunctionalizeAPI

from ..errors import NpufuseError, OpTypeError, ProfileError
from ..gaps import user_line
from ..target.catalog import load_catalog
from .checks import ArgumentCheck, model_device, require_unused, type_check
from .schema import Declaration, declarations, format_returns

NAMESPACE = "npu"

# Dropping the library object would unregister every op, so it lives as long as this module.
_LIB = torch.library.Library(NAMESPACE, "FRAGMENT")


@dataclass(frozen=True)
class Out:
    """One output tensor as the meta function sees it: its shape (ints or SymInts) and dtype."""

    shape: Sequence[Any]
    dtype: torch.dtype


Outputs = Union[Out, tuple[Union[Out, int], ...], list[Out]]


@dataclass(frozen=True)
class SampleCall:
    """One valid call of an op, for the tests that hold every declared op to its schema, fake kernel and
    derivative (``torch.library.opcheck``, the layout property test): tensors small enough to run in
    milliseconds. Positional parameters are passed positionally and keyword-only ones by name, so the same
    call fits the public callable and the registered op (whose first argument's name may differ)."""

    args: tuple
    kwargs: Mapping[str, Any] = field(default_factory=dict)


Samples = Callable[[], Sequence[SampleCall]]


@dataclass(frozen=True)
class NpuOp:
    """One declared op, as ``python -m pytest_npufuse ops`` and the missing-op error list it."""

    name: str
    family: str
    schema: str
    source: str
    graph_name: str = ""  # the registered op a traced graph holds, when not ``name`` (``<name>_functional``)
    samples: Optional[Samples] = field(default=None, compare=False, repr=False)
    differentiable: bool = False
    overloads: tuple[str, ...] = ()  # the names of torch_npu's other schemas of the op (``List``)

    @property
    def op_type(self) -> str:
        """The op-catalog key of the graph node, ``npu::<name>`` (or ``npu::<name>_functional``)."""
        return f"{NAMESPACE}::{self.graph_name or self.name}"

    @property
    def graph_op(self) -> torch._ops.OpOverload:
        """The registered overload a traced graph holds for a call of this op."""
        return getattr(getattr(torch.ops, NAMESPACE), self.graph_name or self.name).default


def no_outputs(call: Arguments) -> tuple:
    """The meta function (and kernel) of an op with no outputs, whose only effect is on the device."""
    return ()


# Declarations, each made once at import by the op's module (as _BINDERS and _VALIDATORS): not session state.
_OPS: dict[str, NpuOp] = {}
OPS = MappingProxyType(_OPS)  # name -> NpuOp, in declaration order


@functools.cache
def _catalog_types() -> frozenset[str]:
    """The built-in catalog's op types, read once: a pure function of the package's files, not session state."""
    return frozenset(load_catalog().entries)


def _python_scalars(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """numpy scalars as the Python numbers torch_npu's bindings read them as: torch's argument parser takes
    ``np.float16(0.088)`` for a ``float`` (op-plugin's ATB tests pass the scale so), the dispatcher does not."""
    if not any(isinstance(value, numpy.generic) for value in (*args, *kwargs.values())):
        return args, kwargs
    plain = [value.item() if isinstance(value, numpy.generic) else value for value in args]
    return tuple(plain), {name: value.item() if isinstance(value, numpy.generic) else value
                          for name, value in kwargs.items()}


def _first_tensor(values: Sequence[Any]) -> Optional[torch.Tensor]:
    """The first tensor among an op's arguments, or None for a factory op (``empty_with_format``), whose
    outputs are made from its sizes alone."""
    for value in values:
        if isinstance(value, torch.Tensor):
            return value
        if isinstance(value, (list, tuple)):
            for item in value:
                if isinstance(item, torch.Tensor):
                    return item
    return None


def _attributed(error: NpufuseError, op: str, eager: bool) -> None:
    """Complete ``error``, raised by a check or kernel of ``op``: the op named (unless an op it called already
    named itself) and, for an eager call, the user's line that called it. While tracing the user's line is
    the frontend's to find: Python's stack then holds the compiler's frames, not the model's."""
    if error.op is None:
        error.op = op
    if eager and error.where is None:
        error.where = user_line() or None


def _allocate(outputs: Outputs, like: Optional[torch.Tensor]) -> Any:
    """Empty tensors of the declared outputs, on ``like``'s device (a fake device while tracing), or made by
    ``torch.empty`` for a factory op (under the fake mode that traces it, a fake tensor); a schema ``int``
    output (e.g. npu_fusion_attention's dropout seed) is declared by its value and kept."""
    if isinstance(outputs, (int, torch.SymInt)):
        return outputs
    if isinstance(outputs, Out):
        if like is None:
            return torch.empty(list(outputs.shape), dtype=outputs.dtype)
        return like.new_empty(list(outputs.shape), dtype=outputs.dtype)
    return type(outputs)(_allocate(out, like) for out in outputs)


def _conformed(name: str, result: Any, outputs: Outputs) -> Any:
    """The CPU kernel's result laid out as the fake kernel allocates it (dense, row-major), after checking
    that it has the shapes and dtypes the meta function declares.

    torch_npu allocates every output of an op from its sizes (``OpPreparation::apply_tensor_without_format``,
    e.g. op-plugin RotaryMulKernelNpuOpApi.cpp), whatever the inputs' strides, and the fake kernel promises
    that layout: a compiled graph plans its next ``view`` from it. A kernel written as torch expressions
    keeps its input's layout (``x * cos`` of a transposed ``x`` is transposed) or returns a view (one
    half of a ``chunk``), so its result is made dense here rather than in each kernel; a shape or dtype
    that differs from the meta's is a bug of the op, never repaired.
    """
    if isinstance(outputs, int):
        if result != outputs:
            raise RuntimeError(f"npufuse bug: the CPU kernel of npu::{name} returned {result!r}, its meta {outputs!r}")
        return result
    if isinstance(outputs, Out):
        if tuple(result.shape) != tuple(outputs.shape) or result.dtype != outputs.dtype:
            raise RuntimeError(
                f"npufuse bug: the CPU kernel of npu::{name} returned {result.dtype} {list(result.shape)} "
                f"but its meta function declares {outputs.dtype} {list(outputs.shape)}"
            )
        return result if result.is_contiguous() else result.contiguous()
    return type(result)(_conformed(name, value, out) for value, out in zip(result, outputs, strict=True))


def _write_back(
    slots: Sequence[tuple[str, int, int]],
    args: tuple,
    kwargs: dict,
    result: Any,
    returns_written: bool,
    returns_single: bool = False,
) -> Any:
    """Copy outputs into the arguments torch_npu overwrites; return the outputs with those arguments in their place.

    ``slots`` holds (argument name, argument position, output position) triples, resolved once at
    declaration so that Dynamo traces only tuple indexing here. An op with one output returns that
    argument itself (e.g. ``npu_scatter_nd_update_``). Without ``returns_written`` the written
    outputs are dropped: torch_npu's op updates those arguments and returns only the others, as a bare
    tensor where its schema returns one (``returns_single``, e.g. ``npu_recurrent_gated_delta_rule``).
    """
    single = isinstance(result, torch.Tensor)
    outputs = [result] if single else list(result)
    for name, arg_position, out_position in slots:
        target = kwargs[name] if name in kwargs else args[arg_position]
        target.copy_(outputs[out_position])
        outputs[out_position] = target
    if not returns_written:
        written = {out_position for _, _, out_position in slots}
        kept = tuple(out for position, out in enumerate(outputs) if position not in written)
        return kept[0] if returns_single else kept
    return outputs[0] if single else tuple(outputs)


@dataclass(frozen=True)
class Arguments:
    """Every argument of one call of an op, by its Python name in the declared signature, defaults filled in.

    An op's checks, meta function and kernel each take this one record (``call.x``, ``call.epsilon``)
    instead of restating the signature: the registry binds each call once, against that signature (the
    dispatcher hands a kernel the schema's positional arguments positionally). Each op has its own
    record type, a frozen dataclass with one field per parameter; :func:`bind` makes one for any op."""


_BINDERS: dict[str, Callable[..., Arguments]] = {}


Binder = Callable[[tuple, Mapping[str, Any]], tuple[Arguments, dict[str, Any]]]
Fit = Callable[[tuple, Mapping[str, Any]], None]  # raises the TypeError of a call that does not fit


def _positional(declaration: Declaration) -> tuple[str, ...]:
    return tuple(parameter.name for parameter in declaration.parameters if not parameter.keyword_only)


def _fit_check(declaration: Declaration) -> Fit:
    """The check that a call fits the signature, raising the TypeError Python raises for one that does not
    (``npu_rms_norm() missing a required argument: 'x'``). Set operations decide that a call fits, and
    ``inspect.Signature.bind`` only words the error: Dynamo traces the public callable, and tracing ``bind``
    on every call of an op would multiply the time a model takes to compile."""
    signature = declaration.signature()
    positional = _positional(declaration)
    known = frozenset(signature.parameters)
    required = frozenset(
        name for name, parameter in signature.parameters.items() if parameter.default is parameter.empty
    )

    def require_fit(args: tuple, kwargs: Mapping[str, Any]) -> None:
        named, placed = set(kwargs), set(positional[: len(args)])
        if len(args) > len(positional) or not named <= known or named & placed or not required <= named | placed:
            try:
                signature.bind(*args, **kwargs)
            except TypeError as error:
                raise OpTypeError(f"{declaration.name}() {error}", op=declaration.name) from None

    return require_fit


def _binder(declaration: Declaration, require_fit: Fit) -> Binder:
    """A function from a call's positional and keyword arguments to its op's record and the arguments given,
    by name (the others are at their declared defaults), or the TypeError Python raises for a call that does
    not fit the signature (``require_fit``, from :func:`_fit_check`)."""
    signature = declaration.signature()
    positional = _positional(declaration)
    fields = [
        (name, Any, field() if parameter.default is parameter.empty else field(default=parameter.default))
        for name, parameter in signature.parameters.items()
    ]
    record = make_dataclass(f"{declaration.name}_arguments", fields, bases=(Arguments,), frozen=True, kw_only=True)

    def make(args: tuple, kwargs: Mapping[str, Any]) -> tuple[Arguments, dict[str, Any]]:
        require_fit(args, kwargs)
        given = dict(zip(positional, args))
        given.update(kwargs)
        return record(**given), given

    return make


def bind(op: Callable[..., Any], *args: Any, **kwargs: Any) -> Arguments:
    """The record of a call of the declared op ``op`` (its public callable) with these arguments, e.g. to run
    one op's meta function on a call of another op that takes the same arguments under other names."""
    return _BINDERS[op.__name__](args, kwargs)[0]


Validator = Callable[[Arguments, Mapping[str, Any]], None]
_VALIDATORS: dict[str, Validator] = {}


def check(op: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """Run the declared op's argument checks (no tensor metadata) on a call, without running the op: for the
    forms torch_npu adds around an op (``.out``, workspace queries) that refuse what the op refuses."""
    _VALIDATORS[op.__name__](*_BINDERS[op.__name__](args, kwargs))


def _validator(
    declaration: Declaration,
    checks: Callable[[Arguments], None],
    unmodeled: Sequence[str],
    typed: Mapping[str, ArgumentCheck],
) -> Validator:
    """The checks of a call that need no tensor metadata: each argument given is of its schema type (as the
    dispatcher would demand, but naming the argument: ``typed``, from :func:`_typed`) and, if ``unmodeled``,
    None; then the op's own ``checks`` of the whole record. An
    argument left out holds its declared default, which needs no check."""
    refused = frozenset(unmodeled)

    def validate(call: Arguments, given: Mapping[str, Any]) -> None:
        for name, value in given.items():
            if name in refused:
                require_unused(declaration.name, **{name: value})
            typed[name](name, value)
        checks(call)

    return validate


def _typed(declaration: Declaration, argument_checks: Mapping[str, ArgumentCheck]) -> dict[str, ArgumentCheck]:
    """Each parameter's type check: its schema type's, or the op's own where its message says more."""
    return {
        parameter.name: argument_checks.get(parameter.name) or type_check(parameter.type, parameter.name)
        for parameter in declaration.parameters
    }


def _type_checker(declaration: Declaration, typed: Mapping[str, ArgumentCheck], require_fit: Fit) -> Fit:
    """The checks that a call fits the signature and that each argument it gives has its type, without the
    record or the op's own checks: what the public callable runs under Dynamo. The dispatcher refuses a
    call that does not fit before any kernel runs, and the fake kernel, which runs the other checks there,
    sees the call after the dispatcher converted its scalars (an int given for a bool arrives as True), so
    only this catches them; building no record keeps it to a few traced instructions per argument."""
    positional = _positional(declaration)

    def check_types(args: tuple, kwargs: Mapping[str, Any]) -> None:
        require_fit(args, kwargs)
        for name, value in zip(positional, args):
            typed[name](name, value)
        for name, value in kwargs.items():
            typed[name](name, value)

    return check_types


def _registered_returns(
    declaration: Declaration, writes_back: Mapping[str, int], schema_mutates: bool
) -> tuple[tuple[str, ...], bool]:
    """The outputs of the registered (functional) op: the declared returns, plus the new values of the
    arguments it writes back where torch_npu's op returns only the others."""
    returns, single = declaration.returns, declaration.single
    if writes_back and not returns:  # torch_npu returns nothing: the op returns the new values
        return ("Tensor",) * len(writes_back), True
    if schema_mutates:
        merged = list(returns)
        for position in sorted(writes_back.values()):
            merged.insert(position, "Tensor")
        return tuple(merged), False
    return returns, single


@dataclass(frozen=True)
class Derivative:
    """How autograd differentiates an op, as op-plugin's ``derivatives.yaml`` declares it for torch_npu:
    ``setup_context(ctx, call, output)`` keeps what the backward needs from the call's
    :class:`Arguments` record and its outputs, and ``backward(ctx, *grads)`` returns one gradient per
    positional argument (keyword-only arguments get none, as torch's ``register_autograd`` wants). The
    backward calls the op's registered backward op (``torch.ops.npu.npu_rms_norm_backward``, ...), so a
    backward graph AOTAutograd traces holds that one opaque node, the kernel msprof would show."""

    setup_context: Callable[[Any, tuple, Any], None]
    backward: Callable[..., Any]


def _register_autograd(qualified: str, backward: Callable[..., Any], setup_context: Callable[..., None]) -> None:
    """``torch.library.register_autograd`` without its refusal of keyword-only tensors.

    torch refuses them because its generated autograd kernel passes keyword-only arguments through without
    differentiating them. That is what op-plugin's derivatives.yaml declares for every such tensor of a
    torch_npu op (npu_moe_gating_top_k differentiates ``x``, never its keyword-only ``bias``), so the same
    kernel is registered here for every differentiable op, at the Autograd key as torch does.
    """
    name, _, overload_name = qualified.partition(".")
    overload = getattr(getattr(getattr(torch.ops, NAMESPACE), name), overload_name or "default")
    info = torch._library.autograd.Info(backward, setup_context)
    _LIB.impl(qualified, torch._library.autograd.make_autograd_impl(overload, info), "Autograd", with_keyset=True)


def _declare_inplace(
    checks: Callable[[Arguments], None], functional: str, written: str, samples: Optional[Samples]
) -> Callable[..., Any]:
    """``torch.ops.npu.<name>`` as torch_npu declares an in-place op whose functional form is the declared op
    ``functional`` (``scatter_update_`` of ``scatter_update``): the schema marks the written argument and
    the return ``Tensor(a!)``, and its CompositeExplicitAutograd kernel runs ``functional`` and copies the
    result into that argument, which it returns, so a fake tensor mode returns the very tensor it was given.
    Its Functionalize kernel makes ``functional``'s result the argument's new value, so a functionalized
    graph holds the functional op and the one ``copy_`` into the input, as torch_npu's gives."""
    public_name = checks.__name__
    declaration = declarations()[public_name]
    if f"{NAMESPACE}::{public_name}" not in _catalog_types():
        raise ProfileError(f"{NAMESPACE}::{public_name} is declared in {checks.__module__} but has no entry in data/ops.toml")
    declared = f"{public_name}{declaration.arguments(mutated=(written,))} -> Tensor(a!)"
    _LIB.define(declared)
    position = [parameter.name for parameter in declaration.parameters].index(written)
    functional_packet = getattr(getattr(torch.ops, NAMESPACE), functional)

    def in_place(*args: Any, **kwargs: Any) -> Any:
        target = kwargs[written] if written in kwargs else args[position]
        target.copy_(functional_packet(*args, **kwargs))
        return target

    def functionalized(*args: Any, **kwargs: Any) -> Any:
        """Functionalization of the op as torch_npu's gives it: the functional op's result becomes the
        argument's new value, with no copy in between (make_fx of a functionalized call holds
        ``functional`` and the one ``copy_`` back into the input)."""
        target = kwargs[written] if written in kwargs else args[position]
        api = CppFunctionalizeAPI()
        with api.redispatch_to_next():
            result = functional_packet(*api.unwrap_tensors(args), **api.unwrap_tensors(kwargs))
        api.replace(target, result)
        api.commit_update(target)
        api.sync(target)
        return target

    _LIB.impl(public_name, in_place, "CompositeExplicitAutograd")
    _LIB.impl(public_name, functionalized, "Functionalize")
    typed, require_fit = _typed(declaration, {}), _fit_check(declaration)
    make = _BINDERS[public_name] = _binder(declaration, require_fit)
    validate = _VALIDATORS[public_name] = _validator(declaration, checks, (), typed)
    check_types = _type_checker(declaration, typed, require_fit)
    packet = getattr(getattr(torch.ops, NAMESPACE), public_name)

    public = _public(public_name, checks, declaration, (make, validate, check_types),
                     lambda args, kwargs: packet(*args, **kwargs))
    _OPS[public_name] = NpuOp(public_name, _family(checks), declared, declaration.source, functional, samples)
    return public


def _family(checks: Callable[[Arguments], None]) -> str:
    """The op's family, the module that declares it (``norm``, ``attention``, ...)."""
    return sys.modules[checks.__module__].__name__.rsplit(".", 1)[-1]


def _public(
    public_name: str, checks: Callable[[Arguments], None], declaration: Declaration,
    checkers: tuple[Binder, Callable[..., None], Fit], run: Callable[[tuple, Mapping[str, Any]], Any],
    devices: tuple[str, ...] = (),
    returns_input: Optional[Callable[[Arguments], bool]] = None,
) -> Callable[..., Any]:
    """The callable ``torch_npu.<op>``: Python scalars for numpy ones, a device argument as the model's,
    the op's checks on an eager call (errors attributed to the op), then ``run``, or, on an eager call
    for which ``returns_input`` holds, the first argument itself. Under Dynamo only the
    types are checked: the fake kernel runs the record's checks, and tracing the binder and every check of
    every call again would multiply a large model's capture time."""
    make, validate, check_types = checkers

    def public(*args: Any, **kwargs: Any) -> Any:
        args, kwargs = _python_scalars(args, kwargs)
        for device in devices:  # keyword-only in every factory schema
            if device in kwargs:
                kwargs[device] = model_device(device, kwargs[device])
        if torch.compiler.is_compiling():
            check_types(args, kwargs)
            return run(args, kwargs)
        try:
            call, given = make(args, kwargs)
            validate(call, given)
            if returns_input is not None and returns_input(call):
                return call.input
            return run(args, kwargs)
        except NpufuseError as error:
            _attributed(error, public_name, eager=True)
            raise

    public.__name__ = public.__qualname__ = public_name
    public.__module__, public.__doc__ = checks.__module__, checks.__doc__
    public.__signature__ = declaration.signature()  # type: ignore[attr-defined]
    return public


def npu_op(
    *,
    meta: Callable[[Arguments], Outputs],
    kernel: Callable[[Arguments], Any],
    writes_back: Mapping[str, int] = MappingProxyType({}),
    schema_mutates: bool = False,
    unmodeled: Sequence[str] = (),
    argument_checks: Mapping[str, ArgumentCheck] = MappingProxyType({}),
    side_effect: bool = False,
    derivative: Optional[Derivative] = None,
    samples: Optional[Samples] = None,
    inplace_of: str = "",
    returns_input: Optional[Callable[[Arguments], bool]] = None,
) -> Callable[[Callable[[Arguments], None]], Callable[..., Any]]:
    """Declare ``torch.ops.npu.<name>`` and its public callable, ``<name>`` being the decorated function's.

    The decorated function holds the op's docstring and the checks of a call that need no tensor metadata
    (scalar ranges, modes, argument combinations), on the call's :class:`Arguments`. The signature is the
    one ``schemas.toml`` declares for the op (:mod:`.schema`), which also names the document the kernel
    follows; each name in ``unmodeled`` (inputs of features the CPU model does not implement) must be None,
    and every argument is checked against its schema type, or by its entry in ``argument_checks``.
    ``writes_back`` maps each argument a torch_npu op updates in place to the output holding its new
    value: the registered op stays functional (one opaque node whose outputs are the new values) and
    the public callable copies those outputs into the arguments and returns the arguments in their place,
    so callers see torch_npu's in-place behaviour. An op declared ``-> ()`` (ATB ops with
    ``Tensor(a!) out``) returns None after the write-back, as torch_npu does; the registered
    op returns the new values. ``schema_mutates`` is for torch_npu ops whose schema marks those arguments
    ``Tensor(a!)`` and returns only the other outputs (e.g. npu_mla_prolog_v3): the op a traced graph
    holds is then op-plugin's ``<name>_functional`` (the updated arguments as extra outputs), and
    ``torch.ops.npu.<name>`` gets the mutating schema with a CompositeImplicitAutograd kernel (the
    functional op, then the write-back), so code calling ``torch.ops.npu.<name>`` directly sees
    torch_npu's outputs and in-place updates, and a traced graph still holds one functional node plus
    the input copies of any in-place update.
    An op without outputs has meta and kernel return ``()`` and returns None; ``side_effect`` marks such
    an op whose only effect is on the device (e.g. a prefetch), so graph passes keep it although nothing
    reads its result. ``derivative`` makes the op differentiable (:class:`Derivative`); an op without
    one has no gradient, as in torch_npu. ``samples`` builds a few valid calls of the op
    (:class:`SampleCall`), from which the tests check every declared op against its schema, its fake
    kernel and its derivative; an op declared without them fails those tests. ``inplace_of`` names the
    declared functional op of which this op is torch_npu's in-place form (``Tensor(a!) self -> Tensor(a!)``,
    the one argument ``writes_back`` names): the op is then that op plus a copy into the argument
    (:func:`_declare_inplace`), and ``meta`` and ``kernel`` are the functional op's. ``returns_input``
    holds for the calls on which torch_npu's op returns its ``input`` itself (``npu_format_cast`` to the
    format the tensor has): an eager call of the public callable then returns it, as torch_npu's does;
    the registered op, which may not alias an input, still returns a new tensor.
    """

    def declare(checks: Callable[[Arguments], None]) -> Callable[..., Any]:
        if inplace_of:
            (written,) = writes_back
            return _declare_inplace(checks, inplace_of, written, samples)
        public_name = checks.__name__
        declaration = declarations()[public_name]
        name = f"{public_name}_functional" if schema_mutates else public_name
        op_type = f"{NAMESPACE}::{name}"
        if op_type not in _catalog_types():
            raise ProfileError(f"{op_type} is declared in {checks.__module__} but has no entry in data/ops.toml")
        for role, function in (("checks", checks), ("meta function", meta), ("kernel", kernel)):
            if len(inspect.signature(function).parameters) != 1:
                raise TypeError(f"npufuse bug: the {role} of {op_type} takes one parameter, the call's Arguments")
        returns, single = _registered_returns(declaration, writes_back, schema_mutates)
        schema = f"{declaration.arguments()} -> {format_returns(returns, single)}"
        _LIB.define(f"{name}{schema}")
        returns_nothing = not returns

        typed, require_fit = _typed(declaration, argument_checks), _fit_check(declaration)
        make = _BINDERS[public_name] = _binder(declaration, require_fit)
        validate = _VALIDATORS[public_name] = _validator(declaration, checks, unmodeled, typed)

        def cpu_kernel(*args: Any, **kwargs: Any) -> Any:
            try:
                call, given = make(args, kwargs)
                validate(call, given)
                outputs = meta(call)
                result = _conformed(name, kernel(call), outputs)
            except NpufuseError as error:
                _attributed(error, public_name, eager=False)
                raise
            return None if returns_nothing else result

        def fake_kernel(*args: Any, **kwargs: Any) -> Any:
            try:
                call, given = make(args, kwargs)
                validate(call, given)
                outputs = meta(call)
            except NpufuseError as error:
                _attributed(error, public_name, eager=False)
                raise
            return None if returns_nothing else _allocate(outputs, _first_tensor([*args, *kwargs.values()]))

        qualified_names = [op_type]
        for overload in declaration.overloads:
            _LIB.define(overload.schema)
            qualified_names.append(f"{op_type}.{overload.name}")
        # Every overload runs the op's checks, meta function and kernel; calling the overload packet picks
        # the overload whose schema the arguments fit, as torch_npu's binding does.
        # A factory op (no tensor argument) has no backend key to dispatch on, as torch.empty: its kernel is
        # the BackendSelect one, which a fake mode still intercepts first.
        factory = not any("Tensor" in parameter.type for parameter in declaration.parameters)
        for qualified in qualified_names:
            torch.library.impl(qualified, "BackendSelect" if factory else "CPU", lib=_LIB)(cpu_kernel)
            torch.library.register_fake(qualified, fake_kernel, lib=_LIB)
        if derivative is not None:
            keep = derivative.setup_context

            def setup_context(
                ctx: Any, inputs: tuple, output: Any, keyword_only_inputs: Mapping[str, Any] = MappingProxyType({})
            ) -> None:
                keep(ctx, make(inputs, keyword_only_inputs)[0], output)

            for qualified in qualified_names:
                _register_autograd(qualified.partition("::")[2], derivative.backward, setup_context)
        packet = getattr(getattr(torch.ops, NAMESPACE), name)
        if side_effect:
            torch.fx.node.has_side_effect(packet.default)
        returns_list = returns == ("Tensor[]",)
        params = [parameter.name for parameter in declaration.parameters]
        slots = tuple((arg, params.index(arg), position) for arg, position in writes_back.items())

        def call(args: tuple, kwargs: Mapping[str, Any]) -> Any:
            return packet(*args, **kwargs)

        def in_place(*args: Any, **kwargs: Any) -> Any:
            kept = _write_back(
                slots, args, kwargs, call(args, kwargs), not schema_mutates, schema_mutates and declaration.single
            )
            # a mutating schema declared ``-> ()`` (npu_gather_pa_kv_cache) returns None, as its kernel must
            return None if schema_mutates and not declaration.returns else kept

        declared = f"{public_name}{schema}"
        if schema_mutates:
            declared = f"{public_name}{declaration.arguments(mutated=writes_back)} -> " + format_returns(
                declaration.returns, declaration.single
            )
            _LIB.define(declared)
            _LIB.impl(public_name, in_place, "CompositeImplicitAutograd")
        returns_none = bool(slots) and not declaration.returns

        check_types = _type_checker(declaration, typed, require_fit)
        devices = tuple(p.name for p in declaration.parameters if p.type.removesuffix("?") == "Device")

        def run(args: tuple, kwargs: Mapping[str, Any]) -> Any:
            if slots:
                written = in_place(*args, **kwargs)
                return None if returns_none else written
            result = call(args, kwargs)
            return list(result) if returns_list else result

        public = _public(public_name, checks, declaration, (make, validate, check_types), run, devices, returns_input)
        family = _family(checks)
        graph_name = "" if name == public_name else name
        overloads = tuple(overload.name for overload in declaration.overloads)
        _OPS[public_name] = NpuOp(
            public_name, family, declared, declaration.source, graph_name, samples, derivative is not None, overloads
        )
        return public

    return declare

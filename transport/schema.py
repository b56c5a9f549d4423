"""Field checkers compiled once from message annotations.

`compile_message(cls)` turns a message's type hints into a function that takes the decoded
msgpack map and returns the message, or raises `ProtocolError` naming the first problem
(missing, unexpected or mistyped field). Supported annotations: int, float (ints widen),
str, bytes, bool, None, `X | None`, `tuple[X, ...]`, `dict[str, X]`, `Literal[...]`,
`Struct` subclasses and `Array` (numpy arrays, `torch.Tensor`). Anything else fails at import
time, not on the wire. Torch is never imported here: an annotation or a value can only be a
torch tensor once some other module has imported torch.
"""

from __future__ import annotations

import sys
import types
import typing
from collections.abc import Callable
from dataclasses import MISSING, fields
from typing import Any

import numpy as np

from transport.errors import ProtocolError
from transport.messages import Struct, TorchTensor

Check = Callable[[Any, str], Any]
Build = Callable[[Any], Any]


def _fail(where: str, expected: str, value: Any) -> typing.NoReturn:
    raise ProtocolError(f"{where}: expected {expected}, got {type(value).__name__}")


def _scalar(kind: type, name: str) -> Check:
    def check(v: Any, where: str) -> Any:
        if type(v) is not kind:
            _fail(where, name, v)
        return v

    return check


def _check_float(v: Any, where: str) -> Any:
    if type(v) is float:
        return v
    if type(v) is int:
        return float(v)
    _fail(where, "float", v)


def _check_none(v: Any, where: str) -> Any:
    if v is not None:
        _fail(where, "None", v)
    return v


def _check_array(v: Any, where: str) -> Any:
    if not isinstance(v, np.ndarray | TorchTensor):
        _fail(where, "tensor", v)
    return v


def _is_tensor_type(tp: Any) -> bool:
    """`tp` is `torch.Tensor` (or `Array`'s run-time stand-in for it)."""
    if tp is TorchTensor:
        return True
    torch = sys.modules.get("torch")  # an annotation naming torch.Tensor imported torch
    return torch is not None and tp is torch.Tensor


def _tuple_of(item: Check) -> Check:
    def check(v: Any, where: str) -> Any:
        if type(v) is not tuple and type(v) is not list:
            _fail(where, "array", v)
        return tuple([item(x, where + "[]") for x in v])

    return check


# Arrays of numbers (token ids, logprobs) are checked by the set of their item types, in C,
# and item by item only when that set holds something else (to widen ints or to fail).
_INT, _FLOAT = frozenset([int]), frozenset([float])


class Unpacked:
    """A packed array as the codec decoded it (a view of its frame, int32 or float32): a
    `tuple[int, ...]` / `tuple[float, ...]` field takes it as a tuple without checking its
    items one by one (their type is the frame's dtype)."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray[Any, Any]) -> None:
        self.array = array


def _int_tuple(v: Any, where: str) -> Any:
    if type(v) is Unpacked:
        if v.array.dtype.kind != "i":
            _fail(where, "ints", v.array)
        return tuple(v.array.tolist())
    if type(v) is not tuple and type(v) is not list:
        _fail(where, "array", v)
    if not set(map(type, v)) <= _INT:
        for x in v:
            if type(x) is not int:
                _fail(where + "[]", "int", x)
    return tuple(v)


def _float_tuple(v: Any, where: str) -> Any:
    if type(v) is Unpacked:
        array = v.array if v.array.dtype.kind == "f" else v.array.astype(np.float64)
        return tuple(array.tolist())  # ints widen to floats, as msgpack ints do
    if type(v) is not tuple and type(v) is not list:
        _fail(where, "array", v)
    if set(map(type, v)) <= _FLOAT:
        return tuple(v)
    return tuple([_check_float(x, where + "[]") for x in v])


def _dict_of(value: Check) -> Check:
    def check(v: Any, where: str) -> Any:
        if type(v) is not dict:
            _fail(where, "map", v)
        out = {}
        for k, x in v.items():
            if type(k) is not str:
                _fail(where + " key", "str", k)
            out[k] = value(x, f"{where}[{k!r}]")
        return out

    return check


def _union(options: list[Check], name: str) -> Check:
    def check(v: Any, where: str) -> Any:
        for option in options:
            try:
                return option(v, where)
            except ProtocolError:
                continue
        _fail(where, name, v)

    return check


def _literal(values: tuple[Any, ...]) -> Check:
    allowed = frozenset(values)

    def check(v: Any, where: str) -> Any:
        if v not in allowed or type(v) not in (str, int, bool):
            raise ProtocolError(f"{where}: {v!r} is not one of {sorted(map(repr, allowed))}")
        return v

    return check


_SCALARS: dict[Any, Check] = {
    int: _scalar(int, "int"),
    str: _scalar(str, "str"),
    bytes: _scalar(bytes, "bytes"),
    bool: _scalar(bool, "bool"),
    float: _check_float,
    type(None): _check_none,
    types.NoneType: _check_none,
}


def compile_type(tp: Any, owner: str) -> Check:
    """A checker for one annotation; raises TypeError for unsupported annotations."""
    if tp in _SCALARS:
        return _SCALARS[tp]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is np.ndarray or origin is np.ndarray or _is_tensor_type(tp):
        return _check_array
    if origin in (types.UnionType, typing.Union):
        if all(
            a is np.ndarray or typing.get_origin(a) is np.ndarray or _is_tensor_type(a)
            for a in args
        ):
            return _check_array
        return _union([compile_type(a, owner) for a in args], " | ".join(map(str, args)))
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        if args[0] is int or args[0] is float:
            return _int_tuple if args[0] is int else _float_tuple
        return _tuple_of(compile_type(args[0], owner))
    if origin is dict and args and args[0] is str:
        return _dict_of(compile_type(args[1], owner))
    if origin is typing.Literal:
        return _literal(args)
    if isinstance(tp, type) and issubclass(tp, Struct):
        build = compile_record(tp)
        return lambda v, where: build(v, where)
    raise TypeError(f"{owner}: unsupported field annotation {tp!r}")


def compile_record(cls: type) -> Callable[[Any, str], Any]:
    """A builder from a decoded map to an instance of the dataclass `cls`."""
    hints = typing.get_type_hints(cls)
    checks = [(f.name, compile_type(hints[f.name], cls.__name__)) for f in fields(cls)]
    required = frozenset(
        f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING
    )
    known = frozenset(name for name, _ in checks)
    name = cls.__name__

    paths = {field_name: f"{name}.{field_name}" for field_name, _ in checks}

    def build(body: Any, where: str = name) -> Any:
        if type(body) is not dict:
            _fail(where, "map", body)
        if not required <= body.keys():
            missing = sorted(required - body.keys())
            extra = sorted(map(str, body.keys() - known))
            raise ProtocolError(f"{where}: missing fields {missing}, unexpected {extra}")
        kwargs = {}
        top = where is name  # paths of top-level fields are made once, not per message
        for field_name, check in checks:
            if field_name in body:
                path = paths[field_name] if top else f"{where}.{field_name}"
                kwargs[field_name] = check(body[field_name], path)
        if len(kwargs) != len(body):
            extra = sorted(map(str, body.keys() - known))
            raise ProtocolError(f"{where}: unexpected fields {extra}")
        return cls(**kwargs)

    return build


def field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))

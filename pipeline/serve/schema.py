"""SGLang's own request/response schema, loaded from SGLang 0.5.23's wheel, as a judge.

SGLang 0.5.22+ gates ``/generate`` with ``sglang/api/v1/api_types.py``: generated code that
needs only ``msgspec``. ``make setup`` downloads the wheel without dependencies into
``.cache/sglang-wheel/`` (git-ignored; the file is neither committed nor vendored); this
module extracts that one file from the wheel and imports it under a private name.

For tests on both sides of the HTTP API (``seer serve`` here; the SGLang generator backend
validates every request it sends with ``validate_generate_request``)::

    from pipeline.serve.schema import validate_generate_request, validate_generate_response

    validate_generate_request(payload)     # the JSON object a client POSTs to /generate
    validate_generate_response(body)       # one response object (or one stream frame)

Each returns SGLang's decoded struct and raises ``SchemaError`` (a ``ValueError``) with
SGLang's own message (e.g. "unknown field `max_tokens`, expected one of ...") when the
payload breaks the contract. ``api_types()`` gives the module itself (``GenerateRequest``,
``GenerateResponse``, ``GetModelInfoResponse``, ``AbortRequest``, ...).
Control routes: ``validate_control_request(path, body)`` decodes a body as the
``io_struct`` class SGLang's handler for ``path`` takes (read from the wheel's
``http_server.py`` and ``io_struct.py``); ``admin_routes()`` lists the routes it marks
``ADMIN_OPTIONAL``. ``SGLangWheelMissing`` (raised when the wheel is absent) tells to run
``make setup``; the folder can be moved with ``SEER_SGLANG_WHEEL_DIR``.
"""

from __future__ import annotations

import ast
import builtins
import os
import re
import sys
import types
import typing
import zipfile
from functools import cache
from pathlib import Path
from typing import Any

SGLANG_VERSION = "0.5.23"
API_TYPES = "sglang/api/v1/api_types.py"
_MODULE = "_seer_sglang_api_types"
DEFAULT_WHEEL_DIR = Path(__file__).resolve().parents[2] / ".cache" / "sglang-wheel"


class SGLangWheelMissing(FileNotFoundError):
    """SGLang's wheel is not in the cache folder (``make setup`` downloads it)."""


class SchemaError(ValueError):
    """A payload that SGLang's own schema refuses."""


def wheel_dir() -> Path:
    return Path(os.environ.get("SEER_SGLANG_WHEEL_DIR", DEFAULT_WHEEL_DIR))


def wheel_path() -> Path:
    folder = wheel_dir()
    wheels = sorted(folder.glob(f"sglang-{SGLANG_VERSION}-*.whl"))
    if not wheels:
        raise SGLangWheelMissing(
            f"no sglang-{SGLANG_VERSION} wheel in {folder}: run `make setup` (it runs `pip "
            f"download --no-deps sglang=={SGLANG_VERSION}` into that folder)"
        )
    return wheels[0]


@cache
def api_types() -> types.ModuleType:
    """SGLang's ``api_types`` module, imported from the wheel (needs ``msgspec``)."""
    with zipfile.ZipFile(wheel_path()) as wheel:
        source = wheel.read(API_TYPES).decode()
    module = types.ModuleType(_MODULE)
    module.__file__ = f"{wheel_path()}!/{API_TYPES}"
    sys.modules[_MODULE] = module  # msgspec resolves annotations through sys.modules
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module


def validate(type_name: str, payload: Any) -> Any:
    """Decode ``payload`` (parsed JSON) as SGLang's ``type_name``; ``SchemaError`` if not."""
    cls = getattr(api_types(), type_name)
    try:
        return cls.from_json_value(payload)
    except ValueError as exc:  # JsonContractError is a ValueError
        raise SchemaError(f"{type_name}: {exc}") from exc


def validate_generate_request(payload: Any) -> Any:
    return validate("GenerateRequest", payload)


def validate_generate_response(payload: Any) -> Any:
    """One response object; a batch response (a list) is checked element by element."""
    if isinstance(payload, list):
        return [validate("GenerateResponse", p) for p in payload]
    return validate("GenerateResponse", payload)


# ---- control routes: the request classes SGLang's HTTP server decodes their bodies into ----
IO_STRUCT = "sglang/srt/managers/io_struct.py"
HTTP_SERVER = "sglang/srt/entrypoints/http_server.py"
_TYPING_NAMES = ("Any", "Dict", "List", "Literal", "Optional", "Tuple", "Union")


@cache
def _wheel_text(member: str) -> str:
    with zipfile.ZipFile(wheel_path()) as wheel:
        return wheel.read(member).decode()


@cache
def route_request_classes() -> dict[str, str]:
    """Route -> the ``io_struct`` class its handler takes as ``Annotated[X, Body()]``, read
    from SGLang's ``http_server.py`` (routes without such a body are left out)."""
    source = _wheel_text(HTTP_SERVER)
    out: dict[str, str] = {}
    pattern = r'@app\.(?:post|api_route)\("([^"]+)"[^\n]*\n(?:@[^\n]*\n)*(?:async )?def \w+\(\s*obj: Annotated\[(?:Optional\[)?(\w+)'  # noqa: E501
    for path, name in re.findall(pattern, source):
        out[path] = name
    return out


@cache
def admin_routes() -> frozenset[str]:
    """The routes SGLang's ``http_server.py`` marks ``@auth_level(AuthLevel.ADMIN_OPTIONAL)``."""
    pattern = r'@app\.\w+\("([^"]+)"[^\n]*\n@auth_level\(AuthLevel\.ADMIN_OPTIONAL\)'
    return frozenset(re.findall(pattern, _wheel_text(HTTP_SERVER)))


@cache
def request_class(name: str) -> type:
    """SGLang's ``io_struct`` request class ``name`` as a msgspec struct: its source is taken
    from the wheel's ``io_struct.py`` (which imports torch and SGLang itself, so it is not
    imported whole) over a base of the two ``BaseReq`` fields; names it refers to that are
    neither typing's nor msgspec's are taken as ``Any``."""
    import msgspec

    tree = ast.parse(_wheel_text(IO_STRUCT))
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)
    if node is None:
        raise SchemaError(f"no class {name} in {IO_STRUCT}")
    module = types.ModuleType(f"{_MODULE}_io_struct")
    sys.modules[module.__name__] = module  # msgspec resolves annotations through sys.modules
    namespace = module.__dict__
    namespace.update({"msgspec": msgspec, **{n: getattr(typing, n) for n in _TYPING_NAMES}})
    exec(  # the base every request shares (its IPC tags do not concern HTTP bodies)
        "class BaseReq(msgspec.Struct, kw_only=True):\n"
        "    rid: Optional[str] = None\n"
        "    http_worker_ipc: Optional[str] = None\n",
        namespace,
    )
    for ref in ast.walk(node):
        if not isinstance(ref, ast.Name) or ref.id == name:
            continue
        if ref.id not in namespace and not hasattr(builtins, ref.id):
            namespace[ref.id] = Any
    body = [n for n in node.body if not isinstance(n, ast.FunctionDef)] or [ast.Pass()]
    node.body, node.decorator_list = body, []  # its fields only
    tree = ast.fix_missing_locations(ast.Module(body=[node], type_ignores=[]))
    exec(compile(tree, f"{wheel_path()}!/{IO_STRUCT}", "exec"), namespace)
    cls: type = namespace[name]
    return cls


def validate_control_request(path: str, payload: Any) -> Any:
    """Decode the body of a POST to ``path`` as the class SGLang's handler takes; stricter
    than SGLang in one way: a key the class does not have is refused (SGLang would drop it
    silently, so a misspelt field would be lost). ``SchemaError`` when it fails."""
    import msgspec

    name = route_request_classes().get(path)
    if name is None:
        raise SchemaError(f"{path}: SGLang {SGLANG_VERSION} has no route taking a JSON body")
    cls = request_class(name)
    if not isinstance(payload, dict):
        raise SchemaError(f"{path}: {name} expects an object, got {type(payload).__name__}")
    unknown = sorted(set(payload) - set(cls.__struct_fields__))  # type: ignore[attr-defined]
    if unknown:
        raise SchemaError(f"{path}: {name} has no field {unknown}")
    try:
        return msgspec.convert(payload, cls)
    except msgspec.ValidationError as exc:
        raise SchemaError(f"{path}: {name}: {exc}") from exc

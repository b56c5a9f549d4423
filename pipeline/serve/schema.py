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
``SGLangWheelMissing`` (raised when the wheel is absent) tells to run ``make setup``; the
folder can be moved with ``SEER_SGLANG_WHEEL_DIR``.
"""

from __future__ import annotations

import os
import sys
import types
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

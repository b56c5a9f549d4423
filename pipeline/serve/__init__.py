"""``seer serve``: the built-in engine behind SGLang 0.5.23's HTTP API.

``start_server(model_path, host, port)`` starts it in this process (a handle with ``.url``
and ``.stop()``); the ``seer serve`` command runs it in the foreground. ``schema`` loads
SGLang's own request/response schema from its wheel for tests. It needs the ``serve`` extra
(starlette, uvicorn): importing it without them raises ``MissingExtraError`` naming it.
"""

from actors.extras import require

require("starlette", extra="serve", feature="`seer serve` (SGLang's HTTP API)")
require("uvicorn", extra="serve", feature="`seer serve` (SGLang's HTTP API)")

from pipeline.serve.server import (  # noqa: E402 (after the check above)
    DefaultModel,
    ServeOptions,
    ServerHandle,
    serve,
    start_server,
)

__all__ = ["DefaultModel", "ServeOptions", "ServerHandle", "serve", "start_server"]

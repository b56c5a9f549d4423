"""BearerAuth: SGLang's ``--api-key`` check as an ASGI wrapper."""

from __future__ import annotations

import secrets
from typing import Any

from starlette.responses import JSONResponse


class BearerAuth:
    """SGLang's ``--api-key``: every route but ``/health*``, ``/ready*`` and ``/metrics*``
    needs ``Authorization: Bearer <key>``; otherwise 401 ``{"error": "Unauthorized"}``."""

    OPEN_PREFIXES = ("/health", "/ready", "/metrics")

    def __init__(self, app: Any, api_key: str) -> None:
        self.app = app
        self.api_key = api_key

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and not self._allowed(scope):
            response = JSONResponse({"error": "Unauthorized"}, status_code=401)
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _allowed(self, scope: Any) -> bool:
        if scope["method"] == "OPTIONS" or scope["path"].startswith(self.OPEN_PREFIXES):
            return True
        headers = dict(scope.get("headers") or [])
        scheme, _, token = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
        return scheme.lower() == "bearer" and secrets.compare_digest(token, self.api_key)

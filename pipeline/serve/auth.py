"""ApiKeyAuth: SGLang 0.5.23's ``--api-key`` and ``--admin-api-key`` checks as an ASGI wrapper.

SGLang's rules (``sglang/srt/utils/auth.py``, ``decide_request_auth``), by route level:

- ``/health*``, ``/ready*``, ``/metrics*`` and ``OPTIONS``: always open;
- control routes (``ADMIN_ROUTES``: SGLang marks them ``ADMIN_OPTIONAL``): with an admin key
  only that key is accepted (the plain key is refused); with only the plain key, that one;
  with neither, open;
- every other route: the plain key when one is set (the admin key does not open them),
  else open.

A refused request gets 401 ``{"error": "Unauthorized"}``.
"""

from __future__ import annotations

import secrets
from typing import Any

from starlette.responses import JSONResponse

from actors.generator.sglang.protocol import ADMIN_ROUTES

# ADMIN_ROUTES: the routes SGLang 0.5.23 marks @auth_level(AuthLevel.ADMIN_OPTIONAL), which
# `seer serve` serves and the SGLang backend calls (one list for both sides)
OPEN_PREFIXES = ("/health", "/ready", "/metrics")


def allowed(method: str, path: str, authorization: str, api_key: str, admin_api_key: str) -> bool:
    """Whether SGLang would let this request through (see the module)."""
    if method == "OPTIONS" or path.startswith(OPEN_PREFIXES):
        return True
    key = (admin_api_key or api_key) if path in ADMIN_ROUTES else api_key
    if not key:
        return True
    scheme, _, token = authorization.partition(" ")
    return scheme.lower() == "bearer" and secrets.compare_digest(token, key)


class ApiKeyAuth:
    def __init__(self, app: Any, api_key: str = "", admin_api_key: str = "") -> None:
        self.app = app
        self.api_key = api_key
        self.admin_api_key = admin_api_key

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            authorization = headers.get(b"authorization", b"").decode("latin-1")
            ok = allowed(
                scope["method"], scope["path"], authorization, self.api_key, self.admin_api_key
            )
            if not ok:
                response = JSONResponse({"error": "Unauthorized"}, status_code=401)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)

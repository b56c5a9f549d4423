"""``seer serve``: the built-in engine behind SGLang 0.5.23's HTTP API.

``start_server(model_path, host, port)`` starts it in this process (a handle with ``.url``
and ``.stop()``); the ``seer serve`` command runs it in the foreground. ``schema`` loads
SGLang's own request/response schema from its wheel for tests.
"""

from pipeline.serve.server import DefaultModel, ServeOptions, ServerHandle, serve, start_server

__all__ = ["DefaultModel", "ServeOptions", "ServerHandle", "serve", "start_server"]

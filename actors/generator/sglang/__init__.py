"""The SGLang backend: a generator drives an SGLang server (or `seer serve`) over its HTTP
API, one `POST /generate` per chunk. `engine.SGLangEngine` is the engine (imported on
use: it needs aiohttp), `protocol` the request/response contract, `options.SGLangOptions`
where the servers are or how to launch them."""

from actors.generator.sglang.options import DEFAULT_COMMAND, SGLangOptions

__all__ = ["DEFAULT_COMMAND", "SGLangOptions"]

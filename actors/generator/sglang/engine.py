"""SGLangEngine: the `RemoteEngine` protocol over one SGLang server's HTTP API.

Each chunk is one `POST /generate` (protocol.py builds and parses it); any number are in
flight at once over one async HTTP client and the server batches them. A chunk that
stays on its server finds its KV in SGLang's prefix cache; one that moves costs a
prefill there, as with the built-in engine.

Failure model: a refused request (400, garbage) fails its chunk with the message. A lost
server (503, refused or reset connection, timeout, or `/health_generate` failing while
chunks are in flight) drops the chunks it held: they are not reported, the next `check`
(the scheduler's `GetLoad`) fails once so the scheduler re-queues them from their
committed progress, and the calls still waiting on that server are cancelled so no late
result arrives. The engine serves again once `/health_generate` passes, and then holds
the weights the server reports: a server restarted by its supervisor comes back with its
default weights, which are version 0 when nothing was published since start, and
otherwise `UNKNOWN_VERSION` (the scheduler gives it no work until the trainer pushed it the
current ones). A server that answers a chunk with other weights than it was given
(restarted between two health checks) counts as lost the same way.

Router: with `router_url`, `/generate` goes through SGLang's router, pinned to this
engine's server by its index in the router's worker list (`router.py`); every control
call still goes to the server.

Context: the longest sequence a chunk may reach is read from `/server_info` at start:
0.5.23's `max_req_input_len` (the scheduler's limit on an input, which also keeps input +
new tokens within its `max_req_len`), capped by `context_length` (the server's
`--context-length`, null unless given) and by `SGLangOptions.context_len`; a server that
reports neither, with no option set, is refused (`ServerError`), never assumed.

Weights (`SGLangOptions.weight_sync`): "disk" writes a published state dict as a Hugging
Face folder and loads it with pause -> `/update_weights_from_disk` (with `weight_version`)
-> continue, then verifies with `/model_info` (a path is loaded as is); "distributed" forms
SGLang's weight-update group at start (this process is rank 0, the server's ranks follow)
and broadcasts each version's tensors under HF names inside `/begin_weight_update` ..
`/end_weight_update` (`distributed.py`). Speculation is the server's own business: the
engine verifies no client drafts and reports SGLang's `spec_*` statistics per chunk.
"""

from __future__ import annotations

import dataclasses
import itertools
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
import structlog

from actors.generator.engine import ChunkRequest, ChunkResult, EngineCounters, EngineLoad
from actors.generator.errors import (
    DuplicateRequestError,
    ServerError,
    ServerLostError,
    WeightVersionError,
)
from actors.generator.sglang.client import SGLangClient
from actors.generator.sglang.distributed import WeightGroup, tensor_meta
from actors.generator.sglang.launch import ServerProcess, fill_command, free_port, server_args
from actors.generator.sglang.options import SGLangOptions
from actors.generator.sglang.protocol import (
    chunk_rid,
    clamp_new_tokens,
    engine_load,
    generate_body,
    parse_generate,
    sum_loads,
    validate_chunk,
)
from actors.generator.sglang.router import TARGET_HEADER, worker_index
from actors.generator.sglang.weights import (
    has_tokenizer,
    hf_tensors,
    is_hf_folder,
    model_config_of,
    write_hf_folder,
)
from actors.model.options import ModelOptions

log = structlog.get_logger()

UNKNOWN_VERSION = -1  # the weights of a server that lost ours (no version ever published)


class SGLangEngine:
    def __init__(
        self,
        opts: SGLangOptions,
        model: ModelOptions,
        index: int = 0,
        *,
        eos_token_id: int | None = None,
        max_batch: int = 32,
        event_hooks: Mapping[str, list[Callable[..., Any]]] | None = None,
    ) -> None:
        """Server `index` of `opts`, serving `model`. `eos_token_id`: ends a sequence (None:
        the server's). `max_batch`: chunks in flight the load reports as this server's cap.
        `event_hooks`: observe every request and response (`client.py`; tests, tools)."""
        self.model = model
        self.eos_token_id = eos_token_id
        self.max_batch = max_batch
        self.event_hooks = event_hooks
        self.opts = opts
        self.index = index
        self.url = self.opts.server_url(index)
        self.model_config = model_config_of(model.path, model.config())
        self.context_len = 0  # from the server's /server_info at start
        self.server: ServerProcess | None = None
        self._client: SGLangClient | None = None
        self._version = 0
        self._serial = itertools.count()
        self._flights: dict[str, tuple[str, anyio.CancelScope]] = {}  # request id -> rid, scope
        self._counts = dict.fromkeys(EngineCounters.__dataclass_fields__, 0)
        self._sums: tuple[int, int, int, int, int] | None = None
        self._lost: str | None = None  # why the server counts as lost (None: serving)
        self._num_unreported = 0  # chunks dropped since `check` last failed
        self._busy = anyio.Event()
        self._weights_dir = Path(self.opts.weights_dir) if self.opts.weights_dir else None
        self._own_dir = False
        self._last_weights: Path | None = None
        self._group: WeightGroup | None = None  # distributed weight sync: we are rank 0
        self._group_name = f"seer_weights_{index}"
        self._published = False  # weights were loaded since start (not the server's own)

    # ---- lifecycle -----------------------------------------------------------------------
    @property
    def weight_version(self) -> int:
        return self._version

    @property
    def client(self) -> SGLangClient:
        if self._client is None:
            raise RuntimeError("SGLangEngine.start() first")
        return self._client

    def _dir(self) -> Path:
        if self._weights_dir is None:
            self._weights_dir = Path(tempfile.mkdtemp(prefix="seer-sglang-"))
            self._own_dir = True
        self._weights_dir.mkdir(parents=True, exist_ok=True)
        return self._weights_dir

    async def start(self) -> None:
        if self.url is None:
            await self._launch()
        assert self.url is not None
        o = self.opts
        self._client = SGLangClient(
            self.url,
            api_key=o.api_key,
            request_timeout_s=o.request_timeout_s,
            connect_timeout_s=o.connect_timeout_s,
            max_connections=o.max_connections,
            event_hooks=self.event_hooks,
            admin_api_key=o.admin_api_key,
        )
        if o.router_url:
            await self._route_via(o.router_url)
        info = await self.client.server_info(timeout=30.0)
        self.context_len = context_len_of(info, o.context_len, self.url)
        if o.weight_sync == "distributed":
            await self._join_weight_group(info)
        if await self.client.weight_version(timeout=30.0) != self._version:
            await self.client.set_weight_version(self._version)
        await self.check()
        log.info("sglang_attached", url=self.url, context_len=self.context_len)

    async def _route_via(self, router_url: str) -> None:
        """`/generate` through the router, pinned to this server by its index there."""
        assert self.url is not None
        listing = await self.client.router_workers(router_url, timeout=30.0)
        index = worker_index(listing, self.url)
        self.client.route_via(router_url, {TARGET_HEADER: str(index)})
        log.info("sglang_routed", url=self.url, router=router_url, index=index)

    async def _launch(self) -> None:
        o, model = self.opts, self.model
        path = model.path
        if not is_hf_folder(path):  # SGLang loads HF folders: write ours (or a random one)
            from actors.model.options import build_model

            state = (await anyio.to_thread.run_sync(build_model, model)).state_dict()
            folder = self._dir() / f"gen{self.index}-initial"
            eos = self.eos_token_id
            path = str(
                await anyio.to_thread.run_sync(
                    write_hf_folder, state, self.model_config, folder, eos
                )
            )
        port = o.base_port + self.index if o.base_port else free_port(o.host)
        self.url = f"http://{o.host}:{port}"
        extra = server_args(
            path,
            skip_tokenizer_init=o.skip_tokenizer_init,
            context_len=o.context_len,
            has_tokenizer=has_tokenizer(path),
        )
        args = fill_command(
            o.command, model=path, host=o.host, port=port, tp_size=o.tp_size, extra=extra
        )
        self.server = ServerProcess(args, self.url, self._dir() / f"server-{self.index}.log")
        log.info("sglang_launching", args=args)
        await self.server.start(o.start_timeout_s)

    async def _join_weight_group(self, info: Mapping[str, Any]) -> None:
        """`/init_weights_update_group` on the server while this process joins as rank 0
        (the server's ranks: its tp_size x pp_size, `rank_offset` 1)."""
        o = self.opts
        ranks = _int_field(info, "tp_size", 1) * _int_field(info, "pp_size", 1)
        backend = o.weight_sync_backend
        if backend == "auto":
            import torch

            backend = "nccl" if torch.cuda.is_available() else "gloo"
        port = free_port(o.weight_sync_host)
        group: dict[str, WeightGroup] = {}

        async def join() -> None:
            group["g"] = await anyio.to_thread.run_sync(
                lambda: WeightGroup.open(
                    master_address=o.weight_sync_host,
                    master_port=port,
                    rank=0,
                    world_size=1 + ranks,
                    group_name=self._group_name,
                    backend=backend,
                    timeout_s=o.weight_sync_timeout_s,
                )
            )

        async with anyio.create_task_group() as tg:
            tg.start_soon(join)
            await self.client.init_weights_update_group(
                master_address=o.weight_sync_host,
                master_port=port,
                rank_offset=1,
                world_size=1 + ranks,
                group_name=self._group_name,
                backend=backend,
                timeout=o.weight_sync_timeout_s,
            )
        self._group = group["g"]
        log.info("sglang_weight_group", url=self.url, backend=backend, ranks=ranks, port=port)

    async def aclose(self) -> None:
        if self._group is not None and self._client is not None:
            with anyio.CancelScope(shield=True):
                try:
                    await self.client.destroy_weights_update_group(self._group_name, 10.0)
                except (ServerError, ServerLostError) as exc:
                    log.warning("sglang_weight_group_destroy_failed", url=self.url, error=str(exc))
        if self._group is not None:
            self._group.close()
            self._group = None
        if self._client is not None:
            await self._client.aclose()
        if self.server is not None:  # SIGTERM, then SIGKILL after 10 s (off the event loop)
            await anyio.to_thread.run_sync(self.server.stop)
        if self._own_dir and self._weights_dir is not None:
            shutil.rmtree(self._weights_dir, ignore_errors=True)

    # ---- chunks --------------------------------------------------------------------------
    async def generate(self, request: ChunkRequest) -> ChunkResult:
        validate_chunk(request, self.context_len, self._version)
        if request.request_id in self._flights:
            raise DuplicateRequestError(f"request {request.request_id!r} is already in flight")
        if self._lost is not None and self._num_unreported:
            self._num_unreported += 1  # the scheduler has not heard yet: no new traffic
            raise ServerLostError(f"server lost: {self._lost}")
        max_new = clamp_new_tokens(request, self.context_len)
        rid = chunk_rid(request.request_id, next(self._serial))
        body = generate_body(request, rid, max_new, self.eos_token_id)
        scope = anyio.CancelScope()
        self._flights[request.request_id] = (rid, scope)
        self._busy.set()
        try:
            with scope:
                data = await self.client.generate(body)
        except ServerLostError as exc:
            self._drop(str(exc))
            raise
        finally:
            del self._flights[request.request_id]
        if scope.cancelled_caught:  # `check` reported the server lost: the chunk is re-queued
            raise ServerLostError(f"chunk of {request.request_id!r} cancelled: server lost")
        try:
            result, spec = parse_generate(
                data,
                request,
                max_new_tokens=max_new,
                context_len=self.context_len,
                eos_token_id=self.eos_token_id,
                weight_version=self._version,
            )
        except WeightVersionError as exc:  # it was given ours: it restarted with its own
            self._drop(f"the server changed weights: {exc}")
            raise ServerLostError(f"{self.url}: {exc}") from None
        except ServerError as exc:
            raise ServerError(f"{self.url}, request {request.request_id!r}: {exc}") from None
        self._count(request, result)
        return dataclasses.replace(result, num_verify_steps=spec.num_verify_steps)

    def _drop(self, reason: str) -> None:
        if self._lost is None:
            log.error("sglang_server_lost", url=self.url, reason=reason)
        self._lost = reason
        self._num_unreported += 1

    def _count(self, request: ChunkRequest, result: ChunkResult) -> None:
        c = self._counts
        c["num_steps"] += result.num_verify_steps or len(result.token_ids)
        c["num_generated_tokens"] += len(result.token_ids)
        c["num_prefill_tokens"] += max(request.num_context_tokens - result.num_cached_tokens, 0)
        if request.generated_ids and result.num_cached_tokens < request.num_context_tokens - 1:
            c["num_reprefills"] += 1
            c["num_reprefilled_tokens"] += request.num_context_tokens - result.num_cached_tokens
        c["num_draft_tokens"] += result.num_draft_tokens
        c["num_accepted_tokens"] += result.num_accepted_tokens

    async def abort(self, request_id: str) -> bool:
        flight = self._flights.get(request_id)
        if flight is None:
            return False
        await self.client.abort(flight[0])
        return True

    # ---- load and health -----------------------------------------------------------------
    def load(self) -> EngineLoad:
        in_flight = len(self._flights)
        sums = self._sums or (in_flight, 0, 0, 0, 0)
        return engine_load(sums, in_flight, self.max_batch)

    def counters(self) -> EngineCounters:
        return EngineCounters(**self._counts)

    @property
    def is_lost(self) -> bool:
        return self._lost is not None

    async def check(self) -> EngineLoad:
        if self._num_unreported:
            n, self._num_unreported = self._num_unreported, 0
            self._cancel_flights()
            raise ServerLostError(f"{n} chunks lost with the server: {self._lost}")
        timeout = self.opts.load_timeout_s
        try:
            if self._lost is not None:
                await self.client.health_generate(timeout)
                await self._check_version(timeout)
                log.warning("sglang_server_back", url=self.url, version=self._version)
                self._lost = None
            self._sums = sum_loads(await self.client.loads(timeout))
        except (ServerLostError, ServerError) as exc:
            self._lost = str(exc)
            self._cancel_flights()
            raise ServerLostError(str(exc)) from None
        return self.load()

    async def _check_version(self, timeout: float) -> None:
        """A server back from the lost holds the weights it reports: a restarted one its
        defaults (version 0 when none were published since start: relabelled)."""
        held = await self.client.weight_version(timeout)
        if held == self._version:
            return
        if held is None and not self._published and self._version == 0:
            await self.client.set_weight_version(0)
            return
        log.error("sglang_server_weights_changed", url=self.url, had=self._version, has=held)
        self._version = UNKNOWN_VERSION

    def _cancel_flights(self) -> None:
        """The scheduler re-queues what was in flight here: stop waiting for it."""
        for _, scope in self._flights.values():
            scope.cancel()

    async def watch(self) -> None:
        """While chunks are in flight, probe `/health_generate` every interval: a server
        that stops answering is lost even when no chunk fails (a hung server). Not while
        we pause it ourselves for a weight update: SGLang holds the probe at the pause and
        answers 503 after its health-check timeout, which is no fault."""
        o = self.opts
        while True:
            if not self._flights and self._lost is None:
                self._busy = anyio.Event()
                await self._busy.wait()
            await anyio.sleep(o.health_interval_s)
            if not self._flights or self._num_unreported or self.client.is_paused:
                continue
            pauses = self.client.num_pauses
            try:
                await self.client.health_generate(o.health_timeout_s)
                self._sums = sum_loads(await self.client.loads(o.health_timeout_s))
            except (ServerLostError, ServerError) as exc:
                if self.client.is_paused or self.client.num_pauses != pauses:
                    log.info("sglang_health_during_pause", url=self.url, error=str(exc))
                elif self._flights:  # the chunks in flight count as lost
                    self._drop(f"health check failed: {exc}")

    # ---- weights -------------------------------------------------------------------------
    async def update_weights(self, source: object, version: int) -> None:
        if self._group is not None and not isinstance(source, str | Path):
            await self._update_distributed(dict(source), version)  # type: ignore[call-overload]
            return
        if isinstance(source, str | Path):
            path = str(source)
        else:
            folder = self._dir() / f"gen{self.index}-v{version}"
            state = dict(source)  # type: ignore[call-overload]
            written = await anyio.to_thread.run_sync(
                write_hf_folder, state, self.model_config, folder, self.eos_token_id
            )
            path = str(written)
        await self.client.update_weights_from_disk(path, version)
        self._version, self._published = version, True
        log.info("sglang_weights_updated", url=self.url, version=version, path=path)
        previous, self._last_weights = self._last_weights, Path(path)
        if (
            previous is not None
            and previous != self._last_weights
            and previous.parent == self._dir()
        ):
            shutil.rmtree(previous, ignore_errors=True)

    async def _update_distributed(self, state: dict[str, Any], version: int) -> None:
        group = self._group
        assert group is not None
        tensors = hf_tensors(state, self.model_config)

        async def broadcast() -> None:
            await anyio.to_thread.run_sync(group.send, tensors)

        await self.client.update_weights_from_distributed(
            tensor_meta(tensors),
            version,
            broadcast,
            group_name=self._group_name,
            timeout=self.opts.weight_sync_timeout_s,
        )
        self._version, self._published = version, True
        log.info("sglang_weights_broadcast", url=self.url, version=version, tensors=len(tensors))


def _int_field(info: Mapping[str, Any], key: str, default: int) -> int:
    value = info.get(key)
    return value if isinstance(value, int) and value > 0 else default


def context_len_of(info: Mapping[str, Any], option: int, url: str | None) -> int:
    """The longest sequence (input + new tokens) the server takes, from its `/server_info`:
    SGLang 0.5.23 reports `max_req_input_len` (min(context - 1, KV capacity - 1) - 5, the
    bound the scheduler holds inputs to; input + new tokens stay within it, below its
    `max_req_len - 1`) and `context_length` (`--context-length`, null unless given);
    `option` > 0 caps both. `ServerError` when nothing says."""
    bounds = [option] if option > 0 else []
    for key in ("max_req_input_len", "context_length"):
        value = info.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            bounds.append(value)
    if not bounds:
        raise ServerError(
            f"{url}/server_info reports neither max_req_input_len nor context_length; set "
            f"SGLangOptions.context_len to the server's context length"
        )
    return min(bounds)

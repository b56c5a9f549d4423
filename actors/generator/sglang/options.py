"""SGLangOptions: where a generator's SGLang server is, or how to launch it.

Attach: `urls` lists one server per generator (generator i drives `urls[i]`). Launch: with
no `urls`, generator i runs `command` with `{python}`, `{model}`, `{host}`, `{port}` and
`{tp_size}` filled in (port `base_port + i`; 0 picks a free port; `tp_size`: GPUs per
server, intra-op threads for `seer serve`), waits for `/health_generate` and stops the
server on exit. The default command is SGLang's own launcher; `seer serve`
fits the same slot on a CPU.

`{server_args}`, as a whole argument of the command, becomes the flags the backend decides
for its server: `--skip-tokenizer-init` (or `--tokenizer-path <the model folder>`) and
`--context-length N` when `context_len` asks for one; a command without it gets none.

Weights (`weight_sync`): "disk" writes each published version as a Hugging Face folder under
`weights_dir` and calls `/update_weights_from_disk` (the server must read that folder);
"distributed" joins SGLang's weight-update group as rank 0 (`/init_weights_update_group`,
master at `weight_sync_host`, a free port) and broadcasts each version's tensors inside
`/begin_weight_update` .. `/end_weight_update` (gloo on CPU, NCCL on GPUs), so nothing
touches a disk both sides share.

Router: with `router_url` (attach mode only), `/generate` goes through SGLang's router
there, pinned to this generator's server (`router.py`); every other call goes to the
server itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from actors.options import check, check_choice, check_positive

DEFAULT_COMMAND = (
    "{python}", "-m", "sglang.launch_server", "--model-path", "{model}",
    "--host", "{host}", "--port", "{port}", "--tp-size", "{tp_size}", "{server_args}",
)  # fmt: skip
WEIGHT_SYNCS = ("disk", "distributed")
WEIGHT_SYNC_BACKENDS = ("auto", "gloo", "nccl")


@dataclass(frozen=True, kw_only=True)
class SGLangOptions:
    """`urls`: attach: one server per generator (generator i drives `urls[i]`). `command`:
    launch (no `urls`): generator i runs this with `{python}`, `{model}`, `{host}`, `{port}` and
    `{tp_size}` filled in. `host`: a launched server's host. `base_port`: a launched server's
    port is `base_port + i` (0: a free port). `api_key`: sent as a bearer token (SGLang's
    `--api-key`). `admin_api_key`: sent instead on the control routes (SGLang's
    `--admin-api-key`: with it set, those routes refuse the plain key). `context_len`: 0 = the
    server's (`/server_info` `max_req_input_len`, capped by its `context_length`); N > 0 caps
    it, and a launched server gets `--context-length N`. `skip_tokenizer_init`: a launched
    server runs with `--skip-tokenizer-init` (token ids travel both ways, so RL needs no
    tokenizer there; the default, so a model folder without tokenizer files serves);
    false: it gets `--tokenizer-path` = the model folder, which must hold a tokenizer.
    `request_timeout_s`:
    one `/generate` call; a server that does not answer in time is lost. `connect_timeout_s`:
    connection set-up. `health_interval_s`: how often `/health_generate` is probed while chunks
    are in flight. `health_timeout_s`: how long that probe may take (it generates a token behind
    the batch). `load_timeout_s`: a `/v1/loads` probe when the scheduler asks for the load (keep
    it below the scheduler's `health_timeout_s`). `start_timeout_s`: a launched server's start.
    `weights_dir`: where published weights are written as Hugging Face folders for
    `/update_weights_from_disk` (the server must see it; "" = a temporary folder).
    `max_connections`: the HTTP pool (chunks in flight at once). `router_url`: send `/generate`
    through this SGLang router, which must list every server in `urls` (`router.running_router`
    starts one); "" = straight to the server. `weight_sync`: "disk" (a folder, the default) or
    "distributed" (SGLang's weight-update group; see the module). `weight_sync_host`: the
    address the servers reach this generator at for the group's rendezvous.
    `weight_sync_backend`: "auto" = nccl when CUDA is available, else gloo.
    `weight_sync_timeout_s`: forming the group and one version's broadcast."""

    urls: tuple[str, ...] = ()
    command: tuple[str, ...] = DEFAULT_COMMAND
    host: str = "127.0.0.1"
    base_port: int = 30000
    api_key: str = ""
    context_len: int = 0
    request_timeout_s: float = 600.0
    connect_timeout_s: float = 5.0
    health_timeout_s: float = 20.0
    health_interval_s: float = 1.0
    load_timeout_s: float = 2.0
    start_timeout_s: float = 600.0
    weights_dir: str = ""
    max_connections: int = 512
    tp_size: int = 1  # the `{tp_size}` of a launched server's command (a layout's threads)
    router_url: str = ""
    admin_api_key: str = ""
    skip_tokenizer_init: bool = True
    weight_sync: str = "disk"
    weight_sync_host: str = "127.0.0.1"
    weight_sync_backend: str = "auto"
    weight_sync_timeout_s: float = 300.0

    def __post_init__(self) -> None:
        check_positive(
            self,
            "request_timeout_s",
            "connect_timeout_s",
            "health_timeout_s",
            "health_interval_s",
            "load_timeout_s",
            "start_timeout_s",
            "max_connections",
            "tp_size",
            "weight_sync_timeout_s",
        )
        check_choice(self, "weight_sync", WEIGHT_SYNCS)
        check_choice(self, "weight_sync_backend", WEIGHT_SYNC_BACKENDS)
        for url in self.urls:
            ok = url.startswith(("http://", "https://"))
            check(ok, "SGLangOptions.urls", "http(s):// URLs", url)
        check(bool(self.urls or self.command), "SGLangOptions", "given urls or a command", "")
        if self.router_url:
            ok = self.router_url.startswith(("http://", "https://"))
            check(ok, "SGLangOptions.router_url", "an http(s):// URL", self.router_url)
            check(bool(self.urls), "SGLangOptions.router_url", "used with urls", self.urls)
        check(0 <= self.base_port <= 65535, "SGLangOptions.base_port", "0..65535", self.base_port)
        check(self.context_len >= 0, "SGLangOptions.context_len", ">= 0", self.context_len)

    def server_url(self, index: int) -> str | None:
        """Generator `index`'s server when attaching (None: launch one)."""
        if not self.urls:
            return None
        check(
            index < len(self.urls),
            "SGLangOptions.urls",
            f"one URL per generator (generator {index} has none)",
            self.urls,
        )
        return self.urls[index].rstrip("/")

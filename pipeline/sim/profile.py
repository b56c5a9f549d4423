"""`seer profile`: measure the built-in engine on this machine into a cost table.

Writes the simulator's table format (``pipeline.sim.costmodel``), shape ``builtin-cpu``:
- decode rows: whole engine steps (``TorchEngine.step``: forward, token choice and the
  engine's bookkeeping) with B requests decoding, the longest at about ``ctx`` tokens of
  context and the others spread down to half of it (``staggered``; the table's
  ``info["context"] = "max"``: the engine pads attention to the longest row), and nothing
  prefilling, median over the steps of a short run; for g > 0 every row verifies a chain
  of g draft tokens (random tokens, so almost all rejected: the verify step the engine
  pays for whatever holds), the same requests a few steps further on. Format 4 scaled the
  g = 0 step by the bare forward's T(B, g) / T(B, 0), which leaves out the engine's
  verify work (the acceptance walk, the rejected nodes' KV): live steps with drafts cost
  5-13% more, relative to the table, than steps without (`seer sim validate`, the depth
  budget drafting every row).
- prefill rows: engine steps that only prefill ``B`` requests (1 and 8) of ``tokens`` new
  tokens in all (at most ``max_prefill_tokens``, what the engine prefills per step). A
  live step often prefills many short prompts at once, which costs more than one prompt of
  the same total length. (Format 2 measured prefill as 0 ms in every pass but the first:
  the request resumed its own parked KV; format 3 releases it.)
Conditions: live, two generator processes step at once (the validation topology), so the
grid is measured while a twin process decodes step after step (``twin``, on in both
grids): what one generator's step costs while the other runs.
Stability: the grid is measured in ``passes`` interleaved passes (every point once per
pass) and each point's table value is the median over passes, so a burst of load during
one pass moves no row by much; the table's ``info`` records the load average before and
after. ``Sweep`` holds the samples pass by pass, so passes can also be spread over a
longer stretch (`seer sim validate` runs one between blocks of live runs:
``measure_pass``). ``--quick``: a small grid for the validation workload.

Cache (``cached_table``): a table depends on the machine, not on the run, so `seer sim
validate` profiles once per machine and reuses the file: ``<cache dir>/profiles/<key>.json``
with the key a hash of everything that determines the table -- the generator (model shape,
batch, KV budget, threads), the grid, the table format, the torch and Python versions, the
CPU model and core count. ``refresh=True`` measures again. A cached table measured while
the load average exceeded the core count is not reused (it describes the load, not the
machine): the next run measures again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import multiprocessing
import os
import platform
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from actors.generator import ChunkRequest, GeneratorOptions, SamplingParams
from actors.generator.builtin import build_torch_engine
from actors.generator.builtin.torch_engine import TorchEngine
from actors.generator.cpus import cores_for, pin_process, pinned_thread
from actors.generator.engine import Draft
from pipeline.config import build_options

__all__ = [
    "SHAPE",
    "Sweep",
    "cache_key",
    "cached_table",
    "cores",
    "measure_pass",
    "profile_engine",
    "run",
    "twin_of",
    "twin_running",
]

SHAPE = "builtin-cpu"
FORMAT = 5  # bump when the measurement method changes (cached tables then re-measure)
DRAFT_LENS = (0, 1, 2, 4, 8)  # the grid's defaults
PREFILLS = (16, 64, 256, 512)  # new tokens per request in a prefill row
PREFILL_SEGMENTS = (1, 8)  # requests per prefill row


def cores(gen: dict[str, Any], index: int) -> set[int] | None:
    """Generator ``index``'s cores when ``gen`` pins (``pin_cores``), else None: the profile
    measures on generator 0's and runs its twin on generator 1's, as live."""
    return cores_for(index, int(gen.get("num_threads", 1))) if gen.get("pin_cores") else None


def _engine(gen: dict[str, Any]) -> TorchEngine:
    opts = build_options(
        GeneratorOptions, {**gen, "kv_budget_tokens": 1 << 20, "profile": False}, "generator"
    )
    return build_torch_engine(opts.model, opts.engine_config())


def staggered(batch: int, ctx: int) -> list[int]:
    """The cached contexts of a profiled decode batch: the longest ``ctx``, the others spread
    evenly down to half of it. Live rows are at different points of their sequences, and
    the engine's attention pads every row to the longest (and masks the rest), so a step's
    cost follows the batch's longest context, not its mean (format 3 measured equal
    contexts: no mask, no padding; live decode steps then cost 1.1-1.4x the table)."""
    if batch == 1:
        return [ctx]
    return [ctx - (ctx // 2) * i // (batch - 1) for i in range(batch)]


def _decode_ms(
    engine: TorchEngine, batch: int, ctx: int, steps: int, draft_lens: tuple[int, ...] = (0,)
) -> dict[int, float]:
    """Per draft length g: the median of engine steps with ``batch`` rows decoding (at
    ``staggered`` contexts) each verifying a chain of g random draft tokens; ``steps`` steps
    at g = 0, then half as many (at least 4) at each g > 0, on the same requests."""
    sampling = SamplingParams(temperature=1.0, ignore_eos=True, seed=1)
    contexts = staggered(batch, ctx)
    plan = [(g, steps if g == 0 else max(steps // 2, 4)) for g in sorted(draft_lens)]
    # enough tokens that every request is still decoding once the last prefill is done and
    # through every measured step (a rejected draft still yields one token; a few slack
    # for the rare random draft token that holds)
    budget = sum(n for _, n in plan) + -(-sum(contexts) // engine.config.max_prefill_tokens) + 8
    ids = [f"d{batch}-{ctx}-{i}" for i in range(batch)]
    for i, (rid, n) in enumerate(zip(ids, contexts, strict=True)):
        prompt = tuple((7 * j + i) % 250 for j in range(n))
        engine.add(ChunkRequest(rid, prompt, budget, params=sampling))
    rng = torch.Generator().manual_seed(batch * 131 + ctx)
    vocab = engine.vocab_size
    times: dict[int, list[float]] = {}
    todo = list(plan)
    while engine.has_work():
        g = todo[0][0] if todo else 0
        drafts = None
        if g:
            drafts = {
                rid: Draft(
                    tuple(torch.randint(0, vocab, (g,), generator=rng).tolist()),
                    tuple(range(-1, g - 1)),
                )
                for rid in engine.decoding_request_ids()
            }
        start = time.perf_counter()
        result = engine.step(drafts)
        elapsed = time.perf_counter() - start
        if todo and result.num_decode_rows == batch and not result.num_prefill_tokens:
            times.setdefault(g, []).append(elapsed)
            if len(times[g]) == todo[0][1]:
                todo.pop(0)
    for rid in ids:  # a later pass must prefill again, not resume parked KV
        engine.release(rid)
    if todo:
        raise RuntimeError(
            f"profile: too few steps decoded all {batch} requests at context {ctx} "
            f"(draft length {todo[0][0]})"
        )
    return {g: 1e3 * statistics.median(t) for g, t in times.items()}


def _prefill_ms(engine: TorchEngine, tokens: int, segments: int = 1) -> float:
    """One step prefilling ``segments`` requests of ``tokens`` new tokens each (nothing
    decoding), median of 3. Each request's KV is released afterwards: a request of the same
    id and prompt would otherwise resume its parked KV and prefill nothing (every pass but
    the first then measured 0 ms)."""
    total = []
    for rep in range(3):
        ids = [f"p{tokens}x{segments}-{rep}-{k}" for k in range(segments)]
        for k, rid in enumerate(ids):
            prompt = tuple((3 * i + k) % 250 for i in range(tokens))
            engine.add(ChunkRequest(rid, prompt, 1, params=SamplingParams(seed=1)))
        spent = 0.0
        while engine.has_work():
            start = time.perf_counter()
            result = engine.step()
            if result.num_prefill_tokens and not result.num_decode_rows:
                spent += time.perf_counter() - start
        for rid in ids:
            engine.release(rid)
        total.append(spent)
    if not min(total) > 0:
        raise RuntimeError(f"profile: no prefill step measured for {segments} x {tokens} tokens")
    return 1e3 * statistics.median(total)


def _twin(gen: dict[str, Any], batch: int, ctx: int, ready: Any, stop: Any) -> None:
    """A second generator's engine decoding ``batch`` requests at about ``ctx`` tokens of
    context, step after step, until ``stop`` is set (a process of its own, as live)."""
    twin_cores = cores(gen, 1)
    if twin_cores is not None:
        pin_process(twin_cores)
    engine = _engine(gen)
    greedy = SamplingParams(temperature=1.0, ignore_eos=True, seed=2)
    prompt = tuple((5 * i) % 250 for i in range(ctx))
    n = 0
    while not stop.is_set():
        ids = [f"t{n}-{i}" for i in range(batch)]
        n += 1
        for rid in ids:
            engine.add(ChunkRequest(rid, prompt, 64, params=greedy))
        while engine.has_work() and not stop.is_set():
            engine.step()
            ready.set()
        for rid in ids:
            engine.release(rid)


def twin_running(
    gen: dict[str, Any], twin: dict[str, int]
) -> contextlib.AbstractContextManager[None]:
    """The twin a table was measured with (its ``info["twin"]``), running for a block."""
    return _twin_running(gen, int(twin["batch"]), int(twin["ctx"]))


@contextlib.contextmanager
def _twin_running(gen: dict[str, Any], batch: int, ctx: int) -> Iterator[None]:
    """Run ``_twin`` in a spawned process for the duration of the block."""
    mp = multiprocessing.get_context("spawn")
    ready, stop = mp.Event(), mp.Event()
    proc = mp.Process(target=_twin, args=(gen, batch, ctx, ready, stop), daemon=True)
    proc.start()
    try:
        deadline = time.monotonic() + 120.0
        while not ready.wait(0.5):
            if not proc.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"profile: the twin generator never stepped ({proc.exitcode=})")
        yield
    finally:
        stop.set()
        proc.join(10.0)
        if proc.is_alive():
            proc.kill()
            proc.join(5.0)


def profile_engine(
    gen: dict[str, Any],
    *,
    batches: tuple[int, ...],
    contexts: tuple[int, ...],
    draft_lens: tuple[int, ...] = DRAFT_LENS,
    prefills: tuple[int, ...] = PREFILLS,
    prefill_segments: tuple[int, ...] = PREFILL_SEGMENTS,
    steps: int = 12,
    passes: int = 1,
    twin: bool = False,
) -> dict[str, Any]:
    """``twin``: measure while a second generator process decodes (a batch of half the
    largest, at the middle context) step after step, as the validation topology's two
    generators do: they share the cores' caches and memory bandwidth, and the machine."""
    if passes < 1:
        raise ValueError(f"passes must be >= 1, got {passes}")
    pair = twin_of({"batches": batches, "contexts": contexts}) if twin else None
    sweep = Sweep(gen, batches, contexts, draft_lens, prefills, prefill_segments, steps, pair)
    beside = twin_running(gen, pair) if pair else contextlib.nullcontext()
    with beside, pinned_thread(cores(gen, 0)):
        engine = _warm_engine(gen)
        for _ in range(passes):  # interleaved: a burst of load hits one sample of each point
            sweep.measure(engine)
    return sweep.table()


class Sweep:
    """The grid's samples, pass by pass (every point once per pass); ``table`` gives each
    point's median over the passes. ``profile_engine`` runs its passes back to back; `seer
    sim validate` runs one between blocks of live runs (``measure_pass``), so that the
    table describes the machine while it ran them. ``twin``: the twin generator the passes
    are measured beside (``twin_of``; None: alone), recorded in the table's ``info``."""

    def __init__(
        self,
        gen: dict[str, Any],
        batches: tuple[int, ...],
        contexts: tuple[int, ...],
        draft_lens: tuple[int, ...] = DRAFT_LENS,
        prefills: tuple[int, ...] = PREFILLS,
        prefill_segments: tuple[int, ...] = PREFILL_SEGMENTS,
        steps: int = 12,
        twin: dict[str, int] | None = None,
    ) -> None:
        self.gen, self.twin = gen, twin
        self.batches, self.contexts, self.draft_lens = batches, contexts, draft_lens
        self.prefills, self.prefill_segments, self.steps = prefills, prefill_segments, steps
        self.decode: dict[tuple[int, int, int], list[float]] = {}  # (B, g, ctx) -> ms
        self.prefill: dict[tuple[int, int], list[float]] = {}
        self.seconds = 0.0
        self.loads: list[float] = []

    @property
    def passes(self) -> int:
        return min((len(v) for v in self.decode.values()), default=0)

    def measure(self, engine: TorchEngine) -> None:
        """One pass over the grid on ``engine``."""
        self.loads.append(_load_average())
        start = time.perf_counter()
        limit = engine.config.max_prefill_tokens  # the most one step prefills
        for ctx in self.contexts:
            for b in self.batches:
                measured = _decode_ms(engine, b, ctx, self.steps, self.draft_lens)
                for g, ms in measured.items():
                    self.decode.setdefault((b, g, ctx), []).append(ms)
        for k in self.prefill_segments:
            for n in self.prefills:
                if k * n <= limit:
                    self.prefill.setdefault((k, n), []).append(_prefill_ms(engine, n, k))
        self.seconds += time.perf_counter() - start
        self.loads.append(_load_average())

    def table(self) -> dict[str, Any]:
        if not self.passes:
            raise RuntimeError("profile: no pass measured")
        rows: list[dict[str, Any]] = []
        for ctx in self.contexts:
            for b in self.batches:
                for g in self.draft_lens:
                    ms = statistics.median(self.decode[(b, g, ctx)])
                    rows.append(
                        {"shape": SHAPE, "kind": "decode", "B": b, "g": g, "ctx": ctx, "ms": ms}
                    )
        for (k, n), times in self.prefill.items():  # B requests, `tokens` new tokens in all
            rows.append(
                {
                    "shape": SHAPE,
                    "kind": "prefill",
                    "B": k,
                    "tokens": k * n,
                    "ms": statistics.median(times),
                }
            )
        spread = [
            (max(v) - min(v)) / statistics.median(v) for v in self.decode.values() if min(v) > 0
        ]
        info = {
            "device": "cpu (this machine)",
            "context": "max",  # a decode row's ctx is its batch's longest (``staggered``)
            "generator": self.gen,
            "seconds": self.seconds,
            "passes": self.passes,
            # max - min over passes relative to the median, per decode point: the median
            "decode_spread_median": statistics.median(spread) if spread else 0.0,
            "load_average": [self.loads[0], self.loads[-1]],
        }
        if self.twin:
            info["twin"] = self.twin
        return {"info": info, "rows": rows}


def sweep_of(gen: dict[str, Any], grid: dict[str, Any]) -> Sweep:
    """An empty sweep of ``grid`` (``grid()``'s shape; its ``twin`` flag: beside ``twin_of``)."""
    keys = ("batches", "contexts", "draft_lens", "prefills", "prefill_segments", "steps")
    pair = twin_of(grid) if grid.get("twin") else None
    return Sweep(gen, **{k: grid[k] for k in keys if k in grid}, twin=pair)


def _warm_engine(gen: dict[str, Any]) -> TorchEngine:
    engine = _engine(gen)
    _decode_ms(engine, 2, 16, 4, (0, 2))  # warm up, drafts too
    return engine


def twin_of(grid: dict[str, Any]) -> dict[str, int]:
    """The twin generator a grid is measured beside: half the largest batch, at the middle
    context."""
    contexts = sorted(grid["contexts"])
    return {"batch": max(1, max(grid["batches"]) // 2), "ctx": contexts[len(contexts) // 2]}


def measure_pass(sweep: Sweep) -> None:
    """One more pass of ``sweep`` on a fresh engine (its twin stepping alongside)."""
    beside = twin_running(sweep.gen, sweep.twin) if sweep.twin else contextlib.nullcontext()
    with beside, pinned_thread(cores(sweep.gen, 0)):
        sweep.measure(_warm_engine(sweep.gen))


def _load_average() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:  # not on every platform
        return float("nan")


def grid(quick: bool, twin: bool = True) -> dict[str, Any]:
    if quick:
        return {
            "batches": (1, 2, 4, 8, 16),
            "contexts": (32, 256, 640),
            "prefills": (16, 64, 256),
            "steps": 8,
            "passes": 3,
            "twin": twin,
        }
    return {
        "batches": (1, 2, 4, 8, 16, 32),
        "contexts": (32, 128, 256, 512, 900),
        "steps": 16,
        "passes": 3,
        "twin": twin,
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cache_key(gen: dict[str, Any], quick: bool, twin: bool = True) -> str:
    """A hash of everything a profile's table depends on (see the module docstring)."""
    what = {
        "format": FORMAT,
        "generator": gen,
        "grid": grid(quick, twin),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "machine": platform.machine(),
    }
    blob = json.dumps(what, sort_keys=True, default=list).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def _measured_under_load(path: Path) -> bool:
    try:
        loads = json.loads(path.read_text())["info"]["load_average"]
    except (OSError, ValueError, KeyError, TypeError):
        return True  # unreadable or from an older format: measure again
    return bool(max(loads) > (os.cpu_count() or 1))


def cache_dir() -> Path:
    """``$SEER_CACHE_DIR``, else ``$XDG_CACHE_HOME/seer-rl``, else ``~/.cache/seer-rl``."""
    if os.environ.get("SEER_CACHE_DIR"):
        return Path(os.environ["SEER_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "seer-rl"


def cached_table(
    gen: dict[str, Any],
    quick: bool,
    *,
    refresh: bool = False,
    folder: Path | None = None,
    twin: bool = True,
) -> tuple[Path, bool]:
    """This machine's table for ``gen`` (profiled now if not cached, or if ``refresh``;
    ``twin``: with a twin generator stepping alongside); returns (path, whether it came
    from the cache)."""
    key = cache_key(gen, quick, twin)
    path = (folder or cache_dir()) / "profiles" / f"builtin-cpu-{key}.json"
    if path.exists() and not refresh and not _measured_under_load(path):
        return path, True
    run(str(path), quick=quick, gen=gen, twin=twin)
    return path, False


def run(
    json_path: str, quick: bool = False, gen: dict[str, Any] | None = None, twin: bool = True
) -> dict[str, Any]:
    from pipeline.rollout.live import bench_generator

    gen = gen or bench_generator(quick)
    table = profile_engine(gen, **grid(quick, twin))
    path = Path(json_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(table, indent=1))
    tmp.replace(path)  # whole or absent: a cache never holds half a table
    info = table["info"]
    print(
        f"wrote {len(table['rows'])} rows to {path} in {info['seconds']:.1f} s "
        f"({info['passes']} passes, median point spread {info['decode_spread_median']:.1%}, "
        f"load average {info['load_average'][0]:.1f} -> {info['load_average'][1]:.1f})"
    )
    return table

"""`seer bench transport`: our typed sockets next to raw pyzmq doing the same work.

Three measurements, each run for both variants in the same invocation, sender and
receiver in separate processes over ipc, repeated and reported as medians:

- small messages: a `Ping` with a 64-byte payload (ours: encode, send, receive, decode
  into a checked message) against raw pyzmq PUSH/PULL moving the same number of bytes;
- round trip: `RequestSocket.call` to a `ReplySocket` echo against raw DEALER/ROUTER
  (p50 and p99 per call);
- bandwidth: a 64 MiB float32 tensor as a `TensorBlob` against a raw 64 MiB frame sent
  with `copy=False`;
- a rollout at real size: one rollout's results, 512 samples x 8,192 completion tokens
  (and a 512-token prompt each), driver -> trainer as `pipeline.rl.steps` sends them
  (`TrainSamples` runs, then the `TrainStep`; ids int32 and logprobs float32 in raw
  frames), against raw pyzmq sending the same frames already encoded; time from the first
  send until the receiver holds every sample, and peak resident memory growth of the
  sender and of the receiver (sampled from /proc every 2 ms). `--quick`: 64 x 1,024.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import tempfile
import threading
import time
from typing import Any, Final

import anyio
import numpy as np
import zmq

from pipeline.records.report import results_table, write_results
from pipeline.rl.steps import batches
from transport.codec import encode
from transport.messages import (
    Message,
    Ping,
    Pong,
    TensorBlob,
    TrainSamples,
    TrainSampleSpec,
    TrainStep,
)
from transport.sockets import ZmqTransport

PAYLOAD = b"x" * 64
TENSOR_MIB = 64
ROLLOUT: Final = (512, 8192, 512)  # samples, completion tokens, prompt tokens
ROLLOUT_QUICK: Final = (64, 1024, 128)
_PAGE: Final = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _rss() -> int:
    """This process's resident bytes now (0 where /proc is missing)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except OSError:
        return 0


class _PeakRss:
    """Peak resident-memory growth over a block, sampled every 2 ms by a thread."""

    def __enter__(self) -> _PeakRss:
        self.base = self.peak = _rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.002):
            self.peak = max(self.peak, _rss())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss())

    @property
    def growth_mib(self) -> float:
        return (self.peak - self.base) / (1 << 20)


# --- receivers and servers (child processes) --------------------------------------------


def _recv_ours(address: str, n: int, out: Any) -> None:
    async def main() -> None:
        t = ZmqTransport()
        pull = t.pull(address, bind=True)
        out.put("bound")
        await pull.recv()
        start = time.perf_counter()
        for _ in range(n - 1):
            await pull.recv()
        out.put(time.perf_counter() - start)
        t.close()

    anyio.run(main)


def _recv_raw(address: str, n: int, out: Any) -> None:
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.bind(address)
    out.put("bound")
    pull.recv_multipart(copy=False)
    start = time.perf_counter()
    for _ in range(n - 1):
        pull.recv_multipart(copy=False)
    out.put(time.perf_counter() - start)
    ctx.destroy(linger=0)


def _recv_rollout_ours(address: str, n: int, out: Any) -> None:
    """Receive one iteration's samples (runs, then the step), holding all, as a trainer."""

    async def main() -> None:
        t = ZmqTransport()  # the default limits
        pull = t.pull(address, bind=True)
        out.put("bound")
        held: list[TrainSampleSpec] = []
        with _PeakRss() as mem:
            while True:
                msg = await pull.recv()
                assert isinstance(msg, TrainSamples | TrainStep)
                held.extend(msg.samples)
                if isinstance(msg, TrainStep):
                    break
        out.put((len(held), mem.growth_mib))
        t.close()

    anyio.run(main)


def _recv_rollout_raw(address: str, n: int, out: Any) -> None:
    """Receive `n` multipart messages, holding all."""
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.bind(address)
    out.put("bound")
    held = []
    with _PeakRss() as mem:
        for _ in range(n):
            held.append(pull.recv_multipart(copy=False))
    out.put((n, mem.growth_mib))
    ctx.destroy(linger=0)


def _serve_ours(address: str, n: int, out: Any) -> None:
    async def main() -> None:
        t = ZmqTransport()
        server = t.reply(address, bind=True)
        out.put("bound")
        for _ in range(n):
            incoming = await server.recv()
            await server.reply(incoming, Pong(seq=incoming.msg.seq, payload=PAYLOAD))  # type: ignore[attr-defined]
        t.close()

    anyio.run(main)


def _serve_raw(address: str, n: int, out: Any) -> None:
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.bind(address)
    out.put("bound")
    for _ in range(n):
        router.send_multipart(router.recv_multipart())
    ctx.destroy(linger=0)


# --- senders and clients (this process) --------------------------------------------------


async def _send_ours(address: str, msgs: list[Any], finish: Any) -> Any:
    t = ZmqTransport()
    push = t.push(address)
    for msg in msgs:
        await push.send(msg)
    result = finish()  # the receiver's timing, read before this end disconnects
    t.close()
    return result


def _send_raw(address: str, frames: list[list[Any]], finish: Any) -> Any:
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.connect(address)
    for f in frames:
        push.send_multipart(f, copy=False)
    result = finish()
    ctx.destroy(linger=0)
    return result


async def _calls_ours(address: str, n: int) -> list[float]:
    t = ZmqTransport()
    client = t.request(address)
    times = []
    for i in range(n):
        start = time.perf_counter()
        await client.call(Ping(seq=i, payload=PAYLOAD), timeout=30)
        times.append(time.perf_counter() - start)
    t.close()
    return times


def _calls_raw(address: str, n: int) -> list[float]:
    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(address)
    frames = [b"corr", *encode(Ping(seq=0, payload=PAYLOAD))]
    times = []
    for _ in range(n):
        start = time.perf_counter()
        dealer.send_multipart(frames)
        dealer.recv_multipart()
        times.append(time.perf_counter() - start)
    ctx.destroy(linger=0)
    return times


def _with_peer(target: Any, address: str, n: int, drive: Any) -> Any:
    """Start `target` in a child process; `drive(finish)` runs here, where `finish()`
    returns the child's measurement (if it sends one). Returns what `drive` returns."""
    spawn = mp.get_context("spawn")
    out = spawn.Queue()
    child = spawn.Process(target=target, args=(address, n, out), daemon=True)
    child.start()
    timeout = 120.0
    try:
        if out.get(timeout=60) != "bound":
            raise RuntimeError("benchmark peer failed to start")
        result = drive(lambda: out.get(timeout=timeout))
        child.join(60)
        return result
    finally:
        if child.is_alive():
            child.kill()


# --- the benchmark ------------------------------------------------------------------------


def _small(base: str, n: int) -> tuple[float, float]:
    msgs = [Ping(seq=i, payload=PAYLOAD) for i in range(n)]
    raw = [[bytes(encode(m)[0])] for m in msgs]  # the same bytes, already made
    ours_s = _with_peer(
        _recv_ours, f"{base}-s1", n, lambda f: anyio.run(_send_ours, f"{base}-s1", msgs, f)
    )
    raw_s = _with_peer(_recv_raw, f"{base}-s2", n, lambda f: _send_raw(f"{base}-s2", raw, f))
    return (n - 1) / ours_s, (n - 1) / raw_s


def _tensor(base: str, k: int) -> tuple[float, float]:
    array = np.random.default_rng(0).standard_normal(TENSOR_MIB << 18, dtype=np.float32)
    msgs = [TensorBlob(name="w", tensor=array) for _ in range(k)]
    raw = [[b"h", array] for _ in range(k)]
    ours_s = _with_peer(
        _recv_ours, f"{base}-t1", k, lambda f: anyio.run(_send_ours, f"{base}-t1", msgs, f)
    )
    raw_s = _with_peer(_recv_raw, f"{base}-t2", k, lambda f: _send_raw(f"{base}-t2", raw, f))
    mb = array.nbytes / 1e6 * (k - 1)
    return mb / ours_s, mb / raw_s


def rollout_messages(
    num_samples: int, num_tokens: int, prompt_tokens: int
) -> list[TrainSamples | TrainStep]:
    """One rollout's results as the driver sends them to a single-rank trainer."""
    rng = np.random.default_rng(0)
    specs = []
    for i in range(num_samples):
        ids = rng.integers(0, 151_000, prompt_tokens + num_tokens, dtype=np.int32).tolist()
        lps = (-rng.random(num_tokens, dtype=np.float32) * 5).tolist()
        specs.append(
            TrainSampleSpec(
                prompt_ids=tuple(ids[:prompt_tokens]),
                completion_ids=tuple(ids[prompt_tokens:]),
                old_logprobs=tuple(lps),
                reward=float(i % 2),
                group_id=f"g{i // 16}",
                weight_versions=(0,),
            )
        )
    runs = list(batches(specs))
    msgs: list[TrainSamples | TrainStep] = [TrainSamples(iteration=0, samples=r) for r in runs[:-1]]
    msgs.append(TrainStep(iteration=0, samples=runs[-1], num_sent=num_samples - len(runs[-1])))
    return msgs


def _timed(drive: Any) -> Any:
    """`drive` wrapped: returns (seconds until the peer reported, its report, our growth)."""

    def run(finish: Any) -> tuple[float, Any, float]:
        start = time.perf_counter()
        with _PeakRss() as mem:
            report = drive(finish)
        return time.perf_counter() - start, report, mem.growth_mib

    return run


def _rollout(base: str, size: tuple[int, int, int]) -> dict[str, float]:
    msgs: list[Message] = list(rollout_messages(*size))
    ours = _with_peer(
        _recv_rollout_ours, f"{base}-o1", len(msgs),
        _timed(lambda f: anyio.run(_send_ours, f"{base}-o1", msgs, f)),
    )  # fmt: skip
    raw_frames = [encode(m) for m in msgs]  # the same bytes, already made
    wire_bytes = sum(memoryview(f).nbytes for frames in raw_frames for f in frames)
    raw = _with_peer(
        _recv_rollout_raw, f"{base}-o2", len(msgs),
        _timed(lambda f: _send_raw(f"{base}-o2", raw_frames, f)),
    )  # fmt: skip
    if ours[1][0] != size[0]:
        raise RuntimeError(f"the trainer side got {ours[1][0]} of {size[0]} samples")
    return {
        "ours_s": ours[0],
        "raw_s": raw[0],
        "ours_sender_peak_mib": ours[2],
        "ours_receiver_peak_mib": ours[1][1],
        "raw_sender_peak_mib": raw[2],
        "raw_receiver_peak_mib": raw[1][1],
        "wire_mib": wire_bytes / (1 << 20),
        "messages": float(len(msgs)),
    }


def _rtt(base: str, n: int) -> tuple[list[float], list[float]]:
    ours = _with_peer(
        _serve_ours, f"{base}-r1", n, lambda f: anyio.run(_calls_ours, f"{base}-r1", n)
    )
    raw = _with_peer(_serve_raw, f"{base}-r2", n, lambda f: _calls_raw(f"{base}-r2", n))
    return ours, raw


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values) * 1e6, q))


def run(json_path: str | None = None, quick: bool = False) -> dict[str, Any]:
    from rich.console import Console

    console = Console()
    repeats, n_small, k_tensor, n_rtt = (1, 5_000, 3, 500) if quick else (3, 100_000, 10, 5_000)
    size = ROLLOUT_QUICK if quick else ROLLOUT
    base = f"ipc://{tempfile.mkdtemp(prefix='seer-bench-')}/bench"
    small, tensor, rtt_ours, rtt_raw, rollouts = [], [], [], [], []
    for i in range(repeats):
        console.print(f"[dim]round {i + 1}/{repeats}[/]")
        small.append(_small(f"{base}{i}", n_small))
        tensor.append(_tensor(f"{base}{i}", k_tensor))
        ours, raw = _rtt(f"{base}{i}", n_rtt)
        rtt_ours += ours
        rtt_raw += raw
        rollouts.append(_rollout(f"{base}{i}", size))
    rollout = {k: statistics.median(r[k] for r in rollouts) for k in rollouts[0]}
    ours_rate = statistics.median(s[0] for s in small)
    raw_rate = statistics.median(s[1] for s in small)
    ours_bw = statistics.median(t[0] for t in tensor)
    raw_bw = statistics.median(t[1] for t in tensor)
    result = {
        "small_msgs": {
            "ours_msgs_per_s": ours_rate,
            "raw_msgs_per_s": raw_rate,
            "ratio": ours_rate / raw_rate,
            "p50_us": _pct(rtt_ours, 50),
            "p99_us": _pct(rtt_ours, 99),
            "raw_p50_us": _pct(rtt_raw, 50),
            "raw_p99_us": _pct(rtt_raw, 99),
        },
        "tensor": {
            "ours_MBps": ours_bw,
            "raw_MBps": raw_bw,
            "ratio": ours_bw / raw_bw,
            "tensor_MiB": TENSOR_MIB,
        },
        "rollout": {
            **rollout,
            "ratio": rollout["ours_s"] / rollout["raw_s"],
            "samples": size[0],
            "tokens": size[1],
            "prompt_tokens": size[2],
        },
        "config": {
            "repeats": repeats,
            "small_msgs": n_small,
            "tensors": k_tensor,
            "round_trips": n_rtt,
            "payload_bytes": len(PAYLOAD),
            "transport": "ipc",
        },
    }
    rows = [
        ("small msgs/s", f"{ours_rate:,.0f}", f"{raw_rate:,.0f}", f"{ours_rate / raw_rate:.2f}"),
        (
            "round trip p50 (us)",
            f"{_pct(rtt_ours, 50):.0f}",
            f"{_pct(rtt_raw, 50):.0f}",
            f"{_pct(rtt_ours, 50) / _pct(rtt_raw, 50):.2f}",
        ),
        (
            "round trip p99 (us)",
            f"{_pct(rtt_ours, 99):.0f}",
            f"{_pct(rtt_raw, 99):.0f}",
            f"{_pct(rtt_ours, 99) / _pct(rtt_raw, 99):.2f}",
        ),
        (
            f"{TENSOR_MIB} MiB tensor MB/s",
            f"{ours_bw:,.0f}",
            f"{raw_bw:,.0f}",
            f"{ours_bw / raw_bw:.2f}",
        ),
        (
            f"rollout {size[0]}x{size[1]} -> trainer (s)",
            f"{rollout['ours_s']:.3f}",
            f"{rollout['raw_s']:.3f}",
            f"{rollout['ours_s'] / rollout['raw_s']:.2f}",
        ),
        (
            "  peak MiB, sender / receiver",
            f"{rollout['ours_sender_peak_mib']:.0f} / {rollout['ours_receiver_peak_mib']:.0f}",
            f"{rollout['raw_sender_peak_mib']:.0f} / {rollout['raw_receiver_peak_mib']:.0f}",
            "",
        ),
    ]
    title = "seer bench transport (medians; ipc; sender and receiver in 2 processes)"
    console.print(results_table(title, ("measure", "ours", "raw pyzmq", "ours / raw"), rows))
    if json_path:
        write_results(json_path, result)
        console.print(f"wrote {json_path}")
    return result


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`seer bench transport`'s own flags (beside --json and --quick)."""
    del parser  # none beyond --json and --quick


def run_args(args: argparse.Namespace) -> None:
    """`seer bench transport` from its parsed flags."""
    run(args.json, quick=args.quick)

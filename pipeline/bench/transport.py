"""`seer bench transport`: our typed sockets next to raw pyzmq doing the same work.

Three measurements, each run for both variants in the same invocation, sender and
receiver in separate processes over ipc, repeated and reported as medians:

- small messages: a `Ping` with a 64-byte payload (ours: encode, send, receive, decode
  into a checked message) against raw pyzmq PUSH/PULL moving the same number of bytes;
- round trip: `RequestSocket.call` to a `ReplySocket` echo against raw DEALER/ROUTER
  (p50 and p99 per call);
- bandwidth: a 64 MiB float32 tensor as a `TensorBlob` against a raw 64 MiB frame sent
  with `copy=False`.
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import tempfile
import time
from typing import Any

import anyio
import numpy as np
import zmq

from pipeline.records.report import results_table, write_results
from transport.codec import encode
from transport.messages import Ping, Pong, TensorBlob
from transport.sockets import ZmqTransport

PAYLOAD = b"x" * 64
TENSOR_MIB = 64


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
    base = f"ipc://{tempfile.mkdtemp(prefix='seer-bench-')}/bench"
    small, tensor, rtt_ours, rtt_raw = [], [], [], []
    for i in range(repeats):
        console.print(f"[dim]round {i + 1}/{repeats}[/]")
        small.append(_small(f"{base}{i}", n_small))
        tensor.append(_tensor(f"{base}{i}", k_tensor))
        ours, raw = _rtt(f"{base}{i}", n_rtt)
        rtt_ours += ours
        rtt_raw += raw
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
    ]
    title = "seer bench transport (medians; ipc; sender and receiver in 2 processes)"
    console.print(results_table(title, ("measure", "ours", "raw pyzmq", "ours / raw"), rows))
    if json_path:
        write_results(json_path, result)
        console.print(f"wrote {json_path}")
    return result

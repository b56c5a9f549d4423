"""`seer bench dispatch`: Earl's data dispatcher against the centralized gather-then-scatter.

One iteration's intermediate data moves from where samples finish (this process, standing
in for the scheduler side) to R trainer ranks (separate processes), over ipc with our
sockets and codec. Per sample of L tokens: token ids (int32), old logprobs (float32) and the
loss mask (uint8), 9 bytes per token, plus its reward and, per group, the advantages.
Lengths are uniform in [C/4, C] for context C (8K / 16K / 32K); samples finish at random
times over a window (`WINDOW_S`), as a rollout's do.

- **centralized** (today's path): each finished sample goes to the driver process; once it
  holds all of them it computes the advantages and sends the whole batch to rank 0, which
  assigns whole groups by LPT and scatters every other rank's shard to it.
- **direct** (Earl): each sample goes, the moment it finishes, to the rank the online
  least-loaded assignment picks (`Dispatcher`); a group's advantages follow when it
  completes; then every rank gets its layout.

Latency is from the last sample finishing to the moment every rank holds its whole batch
(each rank stamps the time it holds all its samples and its layout; one host, one
monotonic clock). Both paths run in the same invocation, interleaved, median of repeats.
Imbalance is max / mean tokens per rank of the direct assignment (the centralized LPT's is
reported beside it). On one host the figures are bounded by memory bandwidth and the
per-message cost of Python and the codec on 2 shared cores, not by a network: the
centralized path moves every byte three times (to the driver, to rank 0, to its rank), the
direct one once, mostly before the last sample finishes.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import numpy as np

from actors.base import Mailbox
from actors.trainer.dispatch import (
    ShardBuffer,
    group_advantage_message,
    imbalance,
    lpt_assign,
)
from actors.trainer.dispatcher import Dispatcher
from transport.messages import (
    GroupAdvantages,
    Message,
    SampleData,
    SampleDispatched,
    SamplesBatch,
    SamplingSpec,
    ShardLayout,
    Stop,
    TrainReport,
    register_extension,
)
from transport.sockets import Incoming, ReplySocket, ZmqTransport

WINDOW_S = 0.5  # samples finish over this window before the last one
GROUP_SIZE = 8
CONTEXTS = (8192, 16384, 32768)
BYTES_PER_TOKEN = 9  # int32 token id + float32 logprob + uint8 mask


@register_extension(1414)
@dataclass(frozen=True, slots=True, kw_only=True)
class CentralTrial(Message):
    """Bench only: this process -> the driver, a call: gather `num_samples` samples, send
    them to rank 0 and collect every rank's report; replied with the ranks' hold times."""

    iteration: int
    num_samples: int
    num_ranks: int


@register_extension(1415)
@dataclass(frozen=True, slots=True, kw_only=True)
class TrialTimes(Message):
    held_at: tuple[float, ...]
    imbalance: float


def _address(folder: str) -> Callable[[str, int], str]:
    return lambda role, index: f"ipc://{folder}/{role}-{index}"


# --- a trainer rank (child process): receive, hold, stamp ---------------------------------


def _rank_main(folder: str, rank: int, num_ranks: int, ready: Any) -> None:
    anyio.run(_rank_loop, folder, rank, num_ranks, ready)


async def _rank_loop(folder: str, rank: int, num_ranks: int, ready: Any) -> None:
    transport = ZmqTransport()
    address = _address(folder)
    inbox = transport.reply(address("trainer", rank), bind=True)
    mailbox = Mailbox(transport, address)
    buffer = ShardBuffer()
    pending: list[tuple[Incoming, ShardLayout]] = []
    ready.put(rank)
    while True:
        incoming = await inbox.recv()
        msg = incoming.msg
        if isinstance(msg, SampleDispatched):
            buffer.add_sample(msg.iteration, msg.sample)
        elif isinstance(msg, SamplesBatch):
            await _hold_batch(msg, rank, num_ranks, buffer, mailbox)
        elif isinstance(msg, ShardLayout):
            pending.append((incoming, msg))
        elif isinstance(msg, GroupAdvantages):
            buffer.add_advantages(msg)
        elif isinstance(msg, Stop):
            break
        pending = await _answer_held(inbox, buffer, pending)
    transport.close()


async def _hold_batch(
    msg: SamplesBatch, rank: int, num_ranks: int, buffer: ShardBuffer, mailbox: Mailbox
) -> None:
    """Keep this rank's part; rank 0 given the whole batch scatters the other parts."""
    owner = [0] * len(msg.samples)
    if rank == 0:
        owner = _central_owner(msg.samples, num_ranks)
        for r in range(1, num_ranks):
            part = [i for i, o in enumerate(owner) if o == r]
            shard = SamplesBatch(
                iteration=msg.iteration,
                samples=tuple(msg.samples[i] for i in part),
                advantages=tuple(msg.advantages[i] for i in part),
                is_flat=tuple(msg.is_flat[i] for i in part),
            )
            await mailbox.send_to("trainer", r, shard)
    for i, sample in enumerate(msg.samples):
        if owner[i] == 0:
            buffer.add_sample(msg.iteration, sample)
            buffer.advantages[sample.request_id] = (msg.advantages[i], 0.0)


async def _answer_held(
    inbox: ReplySocket, buffer: ShardBuffer, pending: list[tuple[Incoming, ShardLayout]]
) -> list[tuple[Incoming, ShardLayout]]:
    waiting = []
    for incoming, layout in pending:
        ids = layout.request_ids
        if all(r in buffer.samples and r in buffer.advantages for r in ids):
            held_at = time.monotonic()
            buffer.take(layout)
            stats = {"held_at": held_at}
            report = TrainReport(iteration=layout.iteration, version=0, stats=stats)
            await inbox.reply(incoming, report)
        else:
            waiting.append((incoming, layout))
    return waiting


def _central_owner(samples: tuple[SampleData, ...], num_ranks: int) -> list[int]:
    """Whole groups by LPT over their tokens: the controller holds the batch, so it sorts."""
    groups = sorted({s.group_id for s in samples})
    tokens = {g: 0 for g in groups}
    for s in samples:
        tokens[s.group_id] += int(s.loss_mask.sum())
    rank_of = dict(zip(groups, lpt_assign([tokens[g] for g in groups], num_ranks), strict=True))
    return [rank_of[s.group_id] for s in samples]


# --- the driver (child process): gather everything, then hand it to rank 0 ---------------


def _driver_main(folder: str, ready: Any) -> None:
    anyio.run(_driver_loop, folder, ready)


async def _driver_loop(folder: str, ready: Any) -> None:
    transport = ZmqTransport()
    address = _address(folder)
    inbox = transport.reply(address("driver", 0), bind=True)
    mailbox = Mailbox(transport, address)
    ready.put("driver")
    trial: tuple[Incoming, CentralTrial] | None = None
    gathered: list[SampleData] = []
    while True:
        incoming = await inbox.recv()
        msg = incoming.msg
        if isinstance(msg, CentralTrial):
            trial, gathered = (incoming, msg), []
        elif isinstance(msg, SampleDispatched):
            gathered.append(msg.sample)
        elif isinstance(msg, Stop):
            break
        if trial is not None and len(gathered) == trial[1].num_samples:
            times = await _central_step(mailbox, trial[1], gathered)
            await inbox.reply(trial[0], times)
            trial = None
    transport.close()


async def _central_step(
    mailbox: Mailbox, trial: CentralTrial, samples: list[SampleData]
) -> Message:
    by_group: dict[str, list[int]] = {}
    for i, s in enumerate(samples):
        by_group.setdefault(s.group_id, []).append(i)
    advantages = [0.0] * len(samples)
    is_flat = [False] * len(samples)
    for group_id, rows in by_group.items():
        members = [(samples[i].request_id, samples[i].reward) for i in rows]
        adv = group_advantage_message(trial.iteration, group_id, members)
        for i, a in zip(rows, adv.advantages, strict=True):
            advantages[i], is_flat[i] = a, adv.is_flat
    batch = SamplesBatch(
        iteration=trial.iteration,
        samples=tuple(samples),
        advantages=tuple(advantages),
        is_flat=tuple(is_flat),
    )
    await mailbox.send_to("trainer", 0, batch)
    owner = _central_owner(batch.samples, trial.num_ranks)
    loads = [0] * trial.num_ranks
    for s, o in zip(samples, owner, strict=True):
        loads[o] += int(s.loss_mask.sum())
    held = [0.0] * trial.num_ranks

    async def layout(rank: int) -> None:
        ids = tuple(s.request_id for s, o in zip(samples, owner, strict=True) if o == rank)
        msg = ShardLayout(
            iteration=trial.iteration, rank=rank, expected_version=0, request_ids=ids,
            num_samples=(), num_tokens=tuple(loads), num_dropped=0, sampling=SamplingSpec(),
        )  # fmt: skip
        reply = await mailbox.call("trainer", rank, msg, 120.0)
        assert isinstance(reply, TrainReport)
        held[rank] = reply.stats["held_at"]

    async with anyio.create_task_group() as tg:
        for rank in range(trial.num_ranks):
            tg.start_soon(layout, rank)
    return TrialTimes(held_at=tuple(held), imbalance=imbalance(loads))


# --- the scheduler side (this process): samples finish, then go out ----------------------


def make_workload(ctx: int, num_groups: int, seed: int) -> tuple[list[SampleData], list[float]]:
    """Samples (lengths uniform in [ctx/4, ctx]) and their finish offsets (the last at
    WINDOW_S), in finishing order."""
    rng = np.random.default_rng(seed)
    samples = []
    for g in range(num_groups):
        for i in range(GROUP_SIZE):
            n = int(rng.integers(ctx // 4, ctx + 1))
            prompt = 64
            mask = np.zeros(n, dtype=np.uint8)
            mask[prompt:] = 1
            samples.append(
                SampleData(
                    request_id=f"g{g}-{i}",
                    group_id=f"g{g}",
                    prompt_len=prompt,
                    token_ids=rng.integers(0, 32000, n, dtype=np.int32),
                    old_logprobs=-rng.random(n, dtype=np.float32) * mask,
                    loss_mask=mask,
                    reward=float(rng.random() < 0.5),
                    weight_versions=(0,),
                )
            )
    order = rng.permutation(len(samples))
    offsets = np.sort(rng.random(len(samples)))
    offsets = offsets / offsets[-1] * WINDOW_S
    return [samples[i] for i in order], offsets.tolist()


async def _stream(samples: list[SampleData], offsets: list[float], send: Any) -> float:
    """Send each sample at its finish time; the time the last one finished."""
    start = time.monotonic()
    last = start
    for sample, offset in zip(samples, offsets, strict=True):
        delay = start + offset - time.monotonic()
        if delay > 0:
            await anyio.sleep(delay)
        last = time.monotonic()
        await send(sample)
    return last


async def _direct(
    mailbox: Mailbox, ranks: int, it: int, samples: list[SampleData], offsets: list[float]
) -> tuple[float, float]:
    d = Dispatcher(
        mailbox, ranks, GROUP_SIZE, iteration=it, expected_version=0, sampling=SamplingSpec()
    )
    last = await _stream(samples, offsets, d.send)
    reports = await d.finish()
    return max(r.stats["held_at"] for r in reports) - last, d.imbalance


async def _central(
    mailbox: Mailbox, ranks: int, it: int, samples: list[SampleData], offsets: list[float]
) -> tuple[float, float]:
    out: list[Message] = []

    async def trial() -> None:
        msg = CentralTrial(iteration=it, num_samples=len(samples), num_ranks=ranks)
        out.append(await mailbox.call("driver", 0, msg, 300.0))

    async def send(sample: SampleData) -> None:
        await mailbox.send_to("driver", 0, SampleDispatched(iteration=it, sample=sample))

    async with anyio.create_task_group() as tg:
        tg.start_soon(trial)
        await anyio.sleep(0.05)  # the driver opens the trial before the first sample
        last = await _stream(samples, offsets, send)
    times = out[0]
    assert isinstance(times, TrialTimes)
    return max(times.held_at) - last, times.imbalance


async def _measure(
    folder: str, ranks: int, contexts: tuple[int, ...], num_groups: int, repeats: int
) -> dict[str, dict[str, Any]]:
    transport = ZmqTransport()
    mailbox = Mailbox(transport, _address(folder))
    rows: dict[str, dict[str, Any]] = {}
    it = 0
    try:
        for ctx in contexts:
            samples, offsets = make_workload(ctx, num_groups, seed=ctx + ranks)
            central, direct, imb, central_imb = [], [], 0.0, 0.0
            for _ in range(repeats):  # interleaved: both paths see the same machine state
                it += 1
                latency, imb = await _direct(mailbox, ranks, it, samples, offsets)
                direct.append(latency)
                it += 1
                latency, central_imb = await _central(mailbox, ranks, it, samples, offsets)
                central.append(latency)
            c, d = statistics.median(central), statistics.median(direct)
            rows[str(ctx)] = {
                "centralized_s": c,
                "direct_s": d,
                "ratio": c / d if d > 0 else float("inf"),
                "imbalance": imb,
                "centralized_imbalance": central_imb,
                "centralized_runs_s": central,
                "direct_runs_s": direct,
                "num_samples": float(len(samples)),
                "batch_mib": sum(len(s.loss_mask) for s in samples) * BYTES_PER_TOKEN / 2**20,
            }
    finally:
        transport.close()
    return rows


def measure_ranks(
    ranks: int, contexts: tuple[int, ...], num_groups: int, repeats: int
) -> dict[str, dict[str, Any]]:
    ctx = mp.get_context("spawn")
    ready = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="seer-dispatch-") as folder:
        procs = [
            ctx.Process(target=_rank_main, args=(folder, r, ranks, ready)) for r in range(ranks)
        ]
        procs.append(ctx.Process(target=_driver_main, args=(folder, ready)))
        for p in procs:
            p.start()
        try:
            for _ in procs:
                ready.get(timeout=120)
            return anyio.run(_measure, folder, ranks, contexts, num_groups, repeats)
        finally:
            for p in procs:
                p.terminate()
                p.join(10)


def run(json_path: str | None, quick: bool = False) -> dict[str, Any]:
    contexts = (8192,) if quick else CONTEXTS
    num_groups, repeats = (4, 1) if quick else (16, 5)
    result: dict[str, Any] = {
        "ranks": {},
        "setup": {
            "group_size": GROUP_SIZE, "num_groups": num_groups, "window_s": WINDOW_S,
            "bytes_per_token": BYTES_PER_TOKEN, "repeats": repeats,
            "lengths": "uniform in [ctx/4, ctx]",
        },
    }  # fmt: skip
    print(f"{'ranks':>5} {'ctx':>6} {'MiB':>6} {'centralized ms':>15} {'direct ms':>10} "
          f"{'ratio':>7} {'imbalance':>9} {'(LPT)':>6}")  # fmt: skip
    for ranks in (2, 4):
        rows = measure_ranks(ranks, contexts, num_groups, repeats)
        result["ranks"][str(ranks)] = rows
        for ctx, row in rows.items():
            print(
                f"{ranks:>5} {ctx:>6} {row['batch_mib']:>6.1f} {row['centralized_s'] * 1e3:>15.1f} "
                f"{row['direct_s'] * 1e3:>10.2f} {row['ratio']:>6.1f}x {row['imbalance']:>9.3f} "
                f"{row['centralized_imbalance']:>6.3f}"
            )
    if json_path:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(json.dumps(result, indent=1))
    return result

"""`seer bench dispatch`: Earl's data dispatcher against the centralized gather-then-scatter.

One iteration's intermediate data moves from where samples finish (this process, standing
in for the scheduler side) to R trainer ranks (separate processes), over ipc with our
sockets and codec. Per sample of L tokens: token ids (int32), old logprobs (float32) and the
loss mask (uint8), 9 bytes per token, plus its reward and, per group, the advantages.
Lengths are uniform in [C/4, C] for context C (8K / 16K / 32K); samples finish at random
times over a window (`WINDOW_S`), as a rollout's do.

- **centralized** (today's path): each finished sample goes to the driver process; once it
  holds all of them it computes the advantages and sends the whole batch to rank 0, which
  assigns whole groups by LPT, scatters every other rank's shard to it and closes every
  shard with the same `ShardEnd` call the direct path ends with.
- **direct** (Earl, the code `seer run --dispatch direct` runs: `Dispatcher`, whose sends
  and end the scheduler's `SampleStream` makes): each sample goes, the moment it finishes,
  to the rank the online least-loaded assignment picks; a group's advantages follow with
  the next sample; when the last sample finishes every rank gets one `ShardEnd` (its
  request ids and the last groups' advantages; the last sample itself rides in its rank's),
  all at once, and the acks are awaited concurrently.

The ranks are the real `TrainerActor` (actor runtime and receiving handlers; no
torch.distributed, no model: nothing trains here). Latency is from the last sample
finishing to the moment every rank holds its whole shard (each rank stamps it when it
answers `ShardEnd`; one host, one monotonic clock). Turning the arrays into training
samples happens after that on both paths, when the step starts (`shard_build_s`: that work
per rank, measured alone in this process, for reference). `floor_s`: an empty `ShardEnd`
to every rank at once, the per-message floor of this host. Both paths and the floor run in the same
invocation, interleaved, median of repeats. Imbalance is max / mean tokens per rank of the
direct assignment (the centralized LPT's is reported beside it). On one host the figures
are bounded by process wake-ups on 2 shared cores, memory bandwidth and the per-message
cost of Python and the codec, not by a network: the centralized path moves every byte
three times (to the driver, to rank 0, to its rank), the direct one once, mostly before
the last sample finishes.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing as mp
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import numpy as np
import structlog

from actors.base import ActorContext, Handler, Mailbox
from actors.dispatcher.actor import Dispatcher, end_shards
from actors.dispatcher.core import group_advantage_message, imbalance, lpt_assign
from actors.trainer.actor import TrainerActor
from actors.trainer.shard import ShardBuffer, train_sample_of
from pipeline.records.report import write_results
from transport.messages import (
    Message,
    SampleData,
    SampleDispatched,
    SamplesBatch,
    SamplingSpec,
    ShardEnd,
    ShardHeld,
    Stop,
    register_extension,
)
from transport.sockets import Incoming, ZmqTransport

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


# --- a trainer rank (child process): the trainer actor's own receiving side ------------


class _BenchRank(TrainerActor):
    """The real `TrainerActor` (its actor runtime and its `SampleDispatched`,
    `GroupAdvantages` and `ShardEnd` handlers) without torch.distributed and a model, which
    the bench does not train; plus the centralized path's `SamplesBatch` (rank 0 given the
    whole batch scatters the other ranks' parts, then closes every shard)."""

    def __init__(self, ctx: ActorContext, ready: Any) -> None:
        super().__init__(ctx)
        self.ready = ready

    def handlers(self) -> Mapping[type[Message], Handler]:
        return {**super().handlers(), SamplesBatch: self.handle_samples_batch}

    async def on_start(self) -> None:
        self.ready.put(self.ctx.index)

    async def on_stop(self) -> None:
        pass

    async def handle_shard_end(self, msg: ShardEnd) -> ShardHeld:
        held = await super().handle_shard_end(msg)
        self.buffer = ShardBuffer()  # nothing trains here: the next trial starts empty
        return held

    async def handle_samples_batch(self, msg: SamplesBatch) -> Message | None:
        rank, num_ranks = self.ctx.index, self.num_peers("trainer")
        if rank != 0:  # this rank's part, from rank 0
            self._keep(msg, range(len(msg.samples)))
            return None
        owner = _central_owner(msg.samples, num_ranks)
        parts = [[i for i, o in enumerate(owner) if o == r] for r in range(num_ranks)]
        for r in range(1, num_ranks):
            shard = SamplesBatch(
                iteration=msg.iteration,
                samples=tuple(msg.samples[i] for i in parts[r]),
                advantages=tuple(msg.advantages[i] for i in parts[r]),
                is_flat=tuple(msg.is_flat[i] for i in parts[r]),
            )
            await self.send_to("trainer", r, shard)
        ends = [
            ShardEnd(
                iteration=msg.iteration,
                rank=r,
                request_ids=tuple(msg.samples[i].request_id for i in parts[r]),
                adv_request_ids=(),
                advantages=(),
                flat_share=(),
            )
            for r in range(num_ranks)
        ]
        self._keep(msg, parts[0])
        own = await self.handle_shard_end(ends[0])
        others = await end_shards(self.mailbox, ends[1:], "trainer", 120.0)
        loads = [sum(int(msg.samples[i].loss_mask.sum()) for i in part) for part in parts]
        held = tuple(h.held_at for h in (own, *others))
        return TrialTimes(held_at=held, imbalance=imbalance(loads))

    def _keep(self, msg: SamplesBatch, rows: Iterable[int]) -> None:
        for i in rows:
            sample = msg.samples[i]
            self.buffer.add_sample(msg.iteration, sample)
            share = 1.0 / GROUP_SIZE if msg.is_flat[i] else 0.0
            self.buffer.advantages[sample.request_id] = (msg.advantages[i], share)


def _rank_main(folder: str, rank: int, num_ranks: int, ready: Any) -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    transport = ZmqTransport()
    address = _address(folder)
    ctx = ActorContext(
        role="trainer",
        index=rank,
        address=address("trainer", rank),
        address_of=address,
        transport=transport,
        peers={"trainer": num_ranks},
    )
    anyio.run(_BenchRank(ctx, ready).run)


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
    times = await mailbox.call("trainer", 0, batch, 120.0)
    assert isinstance(times, TrialTimes)
    return times


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
    """Send each sample at its finish time (``send(sample, is_last)``); the time the last
    one finished."""
    start = time.monotonic()
    last = start
    for i, (sample, offset) in enumerate(zip(samples, offsets, strict=True)):
        delay = start + offset - time.monotonic()
        if delay > 0:
            await anyio.sleep(delay)
        last = time.monotonic()
        await send(sample, i == len(samples) - 1)
    return last


async def _direct(
    mailbox: Mailbox, ranks: int, it: int, samples: list[SampleData], offsets: list[float]
) -> tuple[float, float]:
    d = Dispatcher(mailbox, ranks, GROUP_SIZE, iteration=it, sampling=SamplingSpec())

    async def send(sample: SampleData, is_last: bool) -> None:
        await d.send(sample, last=is_last)  # as the scheduler's stream: the last rides the end

    last = await _stream(samples, offsets, send)
    held = await d.end(120.0)
    return max(h.held_at for h in held) - last, d.imbalance


async def _central(
    mailbox: Mailbox, ranks: int, it: int, samples: list[SampleData], offsets: list[float]
) -> tuple[float, float]:
    out: list[Message] = []

    async def trial() -> None:
        msg = CentralTrial(iteration=it, num_samples=len(samples), num_ranks=ranks)
        out.append(await mailbox.call("driver", 0, msg, 300.0))

    async def send(sample: SampleData, is_last: bool) -> None:
        await mailbox.send_to("driver", 0, SampleDispatched(iteration=it, sample=sample))

    async with anyio.create_task_group() as tg:
        tg.start_soon(trial)
        await anyio.sleep(0.05)  # the driver opens the trial before the first sample
        last = await _stream(samples, offsets, send)
    times = out[0]
    assert isinstance(times, TrialTimes)
    return max(times.held_at) - last, times.imbalance


async def _floor(mailbox: Mailbox, ranks: int, it: int) -> float:
    """One empty `ShardEnd` to every rank at once (what the direct path sends after the last
    sample, without any shard): until every rank has handled it. The per-message floor of
    this host: process wake-ups and a ZeroMQ hop, with nothing to move."""
    ends = [
        ShardEnd(iteration=it, rank=r, request_ids=(), adv_request_ids=(), advantages=(),
                 flat_share=())
        for r in range(ranks)
    ]  # fmt: skip
    start = time.monotonic()
    held = await end_shards(mailbox, ends, "trainer", 120.0)
    return max(h.held_at for h in held) - start


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
            central, direct, floor, imb, central_imb = [], [], [], 0.0, 0.0
            for _ in range(repeats):  # interleaved: both paths see the same machine state
                it += 1
                floor.append(await _floor(mailbox, ranks, it))
                it += 1
                latency, imb = await _direct(mailbox, ranks, it, samples, offsets)
                direct.append(latency)
                it += 1
                latency, central_imb = await _central(mailbox, ranks, it, samples, offsets)
                central.append(latency)
            c, d = statistics.median(central), statistics.median(direct)
            start = time.perf_counter()  # turning arrays into training samples, per rank
            for sample in samples:
                train_sample_of(sample)
            build_s = (time.perf_counter() - start) / ranks
            rows[str(ctx)] = {
                "centralized_s": c,
                "direct_s": d,
                "ratio": c / d if d > 0 else float("inf"),
                "imbalance": imb,
                "centralized_imbalance": central_imb,
                "centralized_runs_s": central,
                "direct_runs_s": direct,
                "floor_s": statistics.median(floor),
                "floor_runs_s": floor,
                "shard_build_s": build_s,
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
          f"{'ratio':>7} {'floor ms':>9} {'imbalance':>9} {'(LPT)':>6}")  # fmt: skip
    for ranks in (2, 4):
        rows = measure_ranks(ranks, contexts, num_groups, repeats)
        result["ranks"][str(ranks)] = rows
        for ctx, row in rows.items():
            print(
                f"{ranks:>5} {ctx:>6} {row['batch_mib']:>6.1f} {row['centralized_s'] * 1e3:>15.1f} "
                f"{row['direct_s'] * 1e3:>10.2f} {row['ratio']:>6.1f}x "
                f"{row['floor_s'] * 1e3:>9.2f} {row['imbalance']:>9.3f} "
                f"{row['centralized_imbalance']:>6.3f}"
            )
    if json_path:
        write_results(json_path, result, indent=1)
    return result


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`seer bench dispatch`'s own flags (beside --json and --quick)."""
    del parser  # none beyond --json and --quick


def run_args(args: argparse.Namespace) -> None:
    """`seer bench dispatch` from its parsed flags."""
    run(args.json, quick=args.quick)

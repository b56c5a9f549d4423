"""Simulated workloads: from Seer's published statistics, or from a recorded live trace.

Seer's workloads (REFERENCES.md; Qin et al. 2025): requests per iteration, mean output and
generation limit per model; G = 8 or 16 (the paper does not say which model used which:
here Moonlight 8, Qwen2-VL-72B 16, Kimi-K2 8). Lengths are long-tailed and correlated
within a group: a group's scale is lognormal (sigma ``group_sigma``), each sample's length
that scale times a lognormal of its own (sigma ``sample_sigma``), capped at the limit (some
samples hit it, as RL rollouts do); the location is solved so that the mean after capping
is the published mean. Prompt lengths are fixed per workload (stated below). Each group's
first sample is its probe. The cost table and KV capacity per instance come with it
(``SeerWorkload``): KV capacity = (H200 memory x 0.9 - weights) / KV bytes per token.

Over epochs (``epoch_requests``, ``EpochModel``): the same prompts recur every epoch (a
dataset of P prompts, iterations of B, so an epoch is P/B iterations; the simulated
iteration of each epoch is the one with the same B prompts). A prompt keeps its group scale
from epoch to epoch (an AR(1) with correlation ``rank_corr``, 1.0 by default); its samples'
spreads recur as a set (each new sample's spread is an AR(1) of one of the last epoch's, in
a shuffled order, correlation ``sample_corr`` = 0.8: the prompts' rank by mean length then
churns 2.3% (Qwen2-VL-72B, G = 16) and 3.2% (Kimi-K2, G = 8) per epoch, inside RhymeRL's
published 2-4%; fresh spreads would churn 4.8% / 7.0%); every length grows by ``drift``
per iteration (the location moves by log(1 + drift) per iteration). Epoch 1 is
``seer_requests``'s workload.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pipeline.sim.simulator import SimRequest
from transport.messages import RolloutRecord

__all__ = [
    "SEER_WORKLOADS",
    "EpochModel",
    "SeerWorkload",
    "epoch_requests",
    "from_record",
    "rank_churn",
    "seer_requests",
]

H200_BYTES = 141e9


@dataclass(frozen=True, slots=True)
class SeerWorkload:
    name: str
    num_requests: int
    group_size: int
    mean_output: int
    max_output: int
    prompt_len: int
    shape: str  # cost-table shape
    weight_bytes: float
    kv_bytes_per_token: int
    note: str

    @property
    def kv_capacity(self) -> int:
        return int((H200_BYTES * 0.9 - self.weight_bytes) / self.kv_bytes_per_token)


SEER_WORKLOADS = {
    "moonlight": SeerWorkload(
        "moonlight",
        3200,
        8,
        22386,
        65536,
        1024,
        "moonlight-16b-a3b",
        32e9,
        31104,
        "Moonlight-16B-A3B on the measured H200 MoE table; MLA KV 576 x 27 layers x 2 B",
    ),
    "qwen2-vl-72b": SeerWorkload(
        "qwen2-vl-72b",
        9600,
        16,
        7615,
        40960,
        2048,
        "qwen2.5-32b",
        65.5e9,
        262144,
        "stand-in: the measured Qwen2.5-32B dense shape (no 72B table), 64 layers x 8 KV heads",
    ),
    "kimi-k2": SeerWorkload(
        "kimi-k2",
        6400,
        8,
        38959,
        98304,
        1024,
        "moonlight-16b-a3b",
        32e9,
        31104,
        "stand-in: the Moonlight MoE table (the only MoE shape measured), its KV per token",
    ),
}


_Draws = list[tuple[float, list[float]]]  # per group: its scale, its samples' spreads


def _draws(w: SeerWorkload, rng: random.Random, group_sigma: float, sample_sigma: float) -> _Draws:
    groups = w.num_requests // w.group_size
    return [
        (rng.gauss(0, group_sigma), [rng.gauss(0, sample_sigma) for _ in range(w.group_size)])
        for _ in range(groups)
    ]


def _location(w: SeerWorkload, z: _Draws) -> float:
    """The location whose capped mean output is the published mean."""
    lo, hi = 0.0, math.log(w.max_output)
    for _ in range(40):  # the location whose capped mean is the published mean
        mu = (lo + hi) / 2
        mean = (
            sum(min(w.max_output, math.exp(mu + g + s)) for g, ss in z for s in ss) / w.num_requests
        )
        lo, hi = (mu, hi) if mean < w.mean_output else (lo, mu)
    return mu


def _place(w: SeerWorkload, z: _Draws, mu: float) -> list[int]:
    return [max(1, min(w.max_output, int(math.exp(mu + g + s)))) for g, ss in z for s in ss]


def _lengths(
    w: SeerWorkload, rng: random.Random, group_sigma: float, sample_sigma: float
) -> list[int]:
    z = _draws(w, rng, group_sigma, sample_sigma)
    return _place(w, z, _location(w, z))


def seer_requests(
    w: SeerWorkload,
    *,
    seed: int = 0,
    scale: float = 1.0,
    group_sigma: float = 0.8,
    sample_sigma: float = 0.45,
) -> list[SimRequest]:
    """``scale`` < 1 keeps that fraction of the groups (for quick runs and tests)."""
    rng = random.Random(seed)
    lens = _lengths(w, rng, group_sigma, sample_sigma)
    groups = max(1, int(w.num_requests // w.group_size * scale))
    out = []
    for g in range(groups):
        for k in range(w.group_size):
            out.append(
                SimRequest(
                    request_id=f"g{g}-{k}",
                    group_id=f"g{g}",
                    prompt_id=f"p{g}",
                    is_probe=k == 0,
                    prompt_len=w.prompt_len,
                    output_len=lens[g * w.group_size + k],
                    max_new_tokens=w.max_output,
                )
            )
    return out


@dataclass(frozen=True, slots=True)
class EpochModel:
    """How lengths recur over epochs (module docstring). ``iterations_per_epoch``: P/B;
    ``drift``: relative growth of every length per iteration (a stated assumption: Seer
    and Earl report growth, neither a rate); ``rank_corr``: the AR(1) correlation of a
    prompt's group scale from one epoch to the next (1.0: the prompt keeps its scale; the
    rank churn then comes from the samples' own spread alone)."""

    iterations_per_epoch: int = 4
    drift: float = 0.005
    rank_corr: float = 1.0
    # the AR(1) correlation of a sample's spread with one of the last epoch's samples
    sample_corr: float = 0.8
    group_sigma: float = 0.8
    sample_sigma: float = 0.45

    def __post_init__(self) -> None:
        if self.iterations_per_epoch < 1:
            raise ValueError(
                f"EpochModel.iterations_per_epoch must be >= 1, got {self.iterations_per_epoch}"
            )
        for name in ("rank_corr", "sample_corr"):
            if not -1.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"EpochModel.{name} must be in [-1, 1], got {getattr(self, name)}")
        if self.drift <= -1.0:
            raise ValueError(f"EpochModel.drift must be > -1, got {self.drift}")


def epoch_requests(
    w: SeerWorkload,
    epoch: int,
    *,
    model: EpochModel | None = None,
    seed: int = 0,
    scale: float = 1.0,
) -> list[SimRequest]:
    """The simulated iteration of ``epoch`` (1-based): group ``e{epoch}-g{i}`` of prompt
    ``p{i}``; epoch 1 has ``seer_requests``'s lengths (same seed, same draws)."""
    if epoch < 1:
        raise ValueError(f"epoch must be >= 1, got {epoch}")
    m = model or EpochModel()
    z = _draws(w, random.Random(seed), m.group_sigma, m.sample_sigma)
    mu = _location(w, z)
    for e in range(2, epoch + 1):
        rng = random.Random(f"{seed}/epoch/{e}")
        keep = math.sqrt(max(0.0, 1 - m.rank_corr**2)) * m.group_sigma
        sample_keep = math.sqrt(max(0.0, 1 - m.sample_corr**2)) * m.sample_sigma
        z = [
            (
                m.rank_corr * g + keep * rng.gauss(0, 1),
                [
                    m.sample_corr * s + sample_keep * rng.gauss(0, 1)
                    for s in sorted(ss, key=lambda _: rng.random())
                ],
            )
            for g, ss in z
        ]
    mu += (epoch - 1) * m.iterations_per_epoch * math.log1p(m.drift)
    lens = _place(w, z, mu)
    groups = max(1, int(w.num_requests // w.group_size * scale))
    return [
        SimRequest(
            request_id=f"e{epoch}-g{g}-{k}",
            group_id=f"e{epoch}-g{g}",
            prompt_id=f"p{g}",
            is_probe=k == 0,
            prompt_len=w.prompt_len,
            output_len=lens[g * w.group_size + k],
            max_new_tokens=w.max_output,
        )
        for g in range(groups)
        for k in range(w.group_size)
    ]


def rank_churn(before: Sequence[SimRequest], after: Sequence[SimRequest]) -> float:
    """The mean change of a prompt's percentile rank by mean output length between two
    epochs' requests (RhymeRL's rank churn, as this project measures it)."""

    def ranks(reqs: Sequence[SimRequest]) -> dict[str, float]:
        total: dict[str, list[int]] = {}
        for r in reqs:
            total.setdefault(r.prompt_id, []).append(r.output_len)
        order = sorted(total, key=lambda p: (sum(total[p]) / len(total[p]), p))
        return {p: i / max(1, len(order) - 1) for i, p in enumerate(order)}

    a, b = ranks(before), ranks(after)
    common = sorted(a.keys() & b.keys())
    return sum(abs(a[p] - b[p]) for p in common) / max(1, len(common))


def from_record(
    record: RolloutRecord,
    max_new_tokens: int,
    tokens: Mapping[str, Sequence[int]] | None = None,
    prompt_tails: Mapping[str, Sequence[int]] | None = None,
) -> list[SimRequest]:
    """A live rollout's requests with their recorded output lengths, in arrival order: by
    arrival time, then as the record lists them (its arrival order). Ties broken by id
    put group 10 before group 1, and the baseline pins groups to instances round-robin by
    arrival, so such a replay split a rollout's work between instances unlike the live
    run. ``tokens``: the run's output tokens by request id (grouped drafts then replay on
    them); every request must have its whole output there. ``prompt_tails``: each prompt's
    last ``PROMPT_TAIL_TOKENS`` tokens by prompt id (the replayed trees start with them)."""
    tokens = tokens or {}
    for r in record.requests:
        got = tokens.get(r.request_id)
        if tokens and (got is None or len(got) < r.output_len):
            have = "none" if got is None else f"{len(got)}"
            raise ValueError(
                f"from_record: request {r.request_id} made {r.output_len} tokens; the "
                f"recorded tokens have {have}"
            )
    reqs = sorted(record.requests, key=lambda r: r.arrival_s)  # stable: the record's order
    return [
        SimRequest(
            request_id=r.request_id,
            group_id=r.group_id,
            prompt_id=r.prompt_id,
            is_probe=r.is_probe,
            prompt_len=r.prompt_len,
            output_len=r.output_len,
            max_new_tokens=max_new_tokens,
            token_ids=tuple(tokens[r.request_id][: r.output_len]) if tokens else (),
            prompt_tail=tuple((prompt_tails or {}).get(r.prompt_id, ())),
        )
        for r in reqs
    ]

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
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pipeline.sim.simulator import SimRequest
from transport.messages import RolloutRecord

__all__ = ["SEER_WORKLOADS", "SeerWorkload", "from_record", "seer_requests"]

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


def _lengths(
    w: SeerWorkload, rng: random.Random, group_sigma: float, sample_sigma: float
) -> list[int]:
    groups = w.num_requests // w.group_size
    z = [
        (rng.gauss(0, group_sigma), [rng.gauss(0, sample_sigma) for _ in range(w.group_size)])
        for _ in range(groups)
    ]
    lo, hi = 0.0, math.log(w.max_output)
    for _ in range(40):  # the location whose capped mean is the published mean
        mu = (lo + hi) / 2
        mean = (
            sum(min(w.max_output, math.exp(mu + g + s)) for g, ss in z for s in ss) / w.num_requests
        )
        lo, hi = (mu, hi) if mean < w.mean_output else (lo, mu)
    return [max(1, min(w.max_output, int(math.exp(mu + g + s)))) for g, ss in z for s in ss]


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

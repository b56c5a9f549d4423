"""Fuzzed endpoints (issue 15 part 4): hypothesis draws malformed frames of every kind for
every actor kind; a real topology (local processes) takes them all, every actor keeps
serving and answers each call with an `ErrorReply`, and the reference rollout afterwards
gives the same samples as before."""

from __future__ import annotations

import random
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.bench.fuzz import (
    HANDLED,
    KINDS,
    REFERENCE_PROMPTS,
    REFERENCE_SAMPLING,
    FuzzCase,
    fuzz_cluster,
    fuzz_topology,
    make_case,
)
from pipeline.rollout import Rollout

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(900)]

FRAMES_PER_ACTOR = 400  # 6 actor kinds: 2,400 frames per run, every kind drawn for each (below)


def draw_cases(role: str, n: int, per_example: int = 20) -> list[FuzzCase]:
    """`n` cases for an actor of `role`, drawn by hypothesis: per case the frame kind, the
    random source that shapes the frame, whether it is a call, and now and then raw bytes
    instead (`per_example` cases per hypothesis example keeps the drawing cheap)."""
    out: list[FuzzCase] = []
    raw = st.lists(st.binary(max_size=64), min_size=1, max_size=3)
    case = st.tuples(
        st.integers(0, len(KINDS) - 1),  # an offset: kinds cycle, so each gets its share
        st.integers(0, 2**32 - 1),
        st.one_of(*(st.none(),) * 7, raw),  # about 1 in 8: raw bytes instead
        st.booleans(),
    )

    @settings(
        max_examples=-(-n // per_example),
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.lists(case, min_size=per_example, max_size=per_example))
    def collect(drawn: list[tuple[int, int, list[bytes] | None, bool]]) -> None:
        for offset, seed, frames, is_call in drawn:
            if frames is not None and frames[0][:1] not in (b"\x93", b"\xdc", b"\xdd"):
                out.append(FuzzCase("raw_bytes", tuple(frames), is_call))  # not an array
            else:
                kind = KINDS[(len(out) + offset) % len(KINDS)]
                made = make_case(kind, random.Random(seed), role)
                out.append(FuzzCase(made.kind, made.frames, is_call))

    collect()
    return out[:n]


def test_every_kind_for_every_actor_is_drawn() -> None:
    cases = {role: draw_cases(role, FRAMES_PER_ACTOR) for role in HANDLED}
    for role, drawn in cases.items():
        assert len(drawn) == FRAMES_PER_ACTOR
        assert set(KINDS) <= {c.kind for c in drawn}, role
        assert any(c.is_call for c in drawn) and not all(c.is_call for c in drawn)


async def test_malformed_frames_leave_every_actor_serving(tmp_path: Path) -> None:
    async with Rollout(fuzz_topology(str(tmp_path))) as rollout:
        cluster = rollout.cluster
        assert cluster is not None
        with anyio.fail_after(600):
            before = await rollout.generate(REFERENCE_PROMPTS, 2, REFERENCE_SAMPLING)
            cases = {key: draw_cases(key[0], FRAMES_PER_ACTOR) for key in cluster.status}
            assert {role for role, _ in cases} == set(HANDLED)  # every actor kind
            report = await fuzz_cluster(cluster, cases)
            after = await rollout.generate(REFERENCE_PROMPTS, 2, REFERENCE_SAMPLING)
    print("fuzz report:", {k: v for k, v in report.items() if k != "by_actor"})
    assert report["frames"] == FRAMES_PER_ACTOR * len(HANDLED)
    assert report["actor_crashes"] == 0, report["crashed"]
    assert report["calls"] > 0
    assert report["error_replies"] == report["calls"]  # every call answered with ErrorReply
    assert report["missing_replies"] == 0 and report["other_replies"] == 0
    tokens = [[s.token_ids for s in g.samples] for g in before]
    assert tokens == [[s.token_ids for s in g.samples] for g in after]
    assert any(len(t) for group in tokens for t in group)

"""The benchmark workload: long-tailed, group-correlated, deterministic, sized as asked."""

from __future__ import annotations

import pytest

from pipeline.rollout import (
    Workload,
    WorkloadPrompt,
    describe,
    make_workload,
    true_lengths,
    workload_from_trace,
)
from transport.messages import (
    ChunkRecord,
    RequestRecord,
    RolloutRecord,
)


@pytest.mark.parametrize("seed", range(6))
def test_default_workload_has_the_shape_of_rl_rollouts(seed: int) -> None:
    d = describe(make_workload(seed=seed))
    assert d["num_requests"] == 16 * 8
    assert d["p99_over_p50"] >= 4
    assert 2.5 <= d["max_over_mean"] <= 3.5
    assert d["intraclass_corr"] >= 0.9
    assert 20_000 <= d["total_tokens"] <= 40_000


def test_same_seed_same_workload_other_seed_other_workload() -> None:
    assert make_workload(seed=7) == make_workload(seed=7)
    a, b = make_workload(seed=7), make_workload(seed=8)
    assert [p.target_lens for p in a.prompts] != [p.target_lens for p in b.prompts]
    assert [p.token_ids for p in a.prompts] != [p.token_ids for p in b.prompts]


def test_sizes_are_respected() -> None:
    w = make_workload(
        num_groups=5,
        group_size=3,
        mean_len=40,
        max_len=100,
        prompt_len_range=(4, 6),
        vocab_size=50,
        seed=1,
        min_len=5,
    )
    assert len(w.prompts) == 5 and w.group_size == 3 and w.max_new_tokens == 100
    assert len({p.prompt_id for p in w.prompts}) == 5
    for p in w.prompts:
        assert len(p.target_lens) == 3
        assert all(5 <= n <= 100 for n in p.target_lens)
        assert 4 <= len(p.token_ids) <= 6
        assert all(0 <= t < 50 for t in p.token_ids)
    assert w.num_requests == 15
    assert abs(w.total_tokens / 15 - 40) <= 2  # the mean is solved for, up to rounding


def test_larger_workloads_keep_the_shape() -> None:
    d = describe(make_workload(num_groups=64, group_size=4, mean_len=100, max_len=300))
    assert d["num_requests"] == 256
    assert d["p99_over_p50"] >= 4 and 2.5 <= d["max_over_mean"] <= 3.5
    assert d["intraclass_corr"] >= 0.9


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_groups": 0},
        {"group_size": 0},
        {"mean_len": 700},
        {"min_len": 300},
        {"prompt_len_range": (9, 3)},
        {"vocab_size": 0},
    ],
)
def test_bad_sizes_raise(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        make_workload(**kwargs)  # type: ignore[arg-type]


def test_describe_on_a_hand_built_workload() -> None:
    w = Workload(
        prompts=(WorkloadPrompt("a", (1, 2), (10, 10)), WorkloadPrompt("b", (3,), (30, 30))),
        group_size=2,
        max_new_tokens=30,
        seed=0,
    )
    d = describe(w)
    assert d["total_tokens"] == 80 and d["mean"] == 20 and d["max"] == 30
    assert d["p50"] == 20 and d["max_over_mean"] == 1.5
    assert d["intraclass_corr"] == 1.0  # siblings are equal: all variance is between groups


def test_true_lengths_names_every_request() -> None:
    w = make_workload(num_groups=3, group_size=2, seed=2)
    lens = true_lengths(w, lambda g, s: f"g{g}/s{s}")
    assert len(lens) == 6
    assert lens["g1/s0"] == w.prompts[1].target_lens[0]
    assert lens["g2/s1"] == w.prompts[2].target_lens[1]


def _request(rid: str, group: str, prompt_len: int, out: int) -> RequestRecord:
    return RequestRecord(
        request_id=rid,
        group_id=group,
        prompt_id=f"prompt-{group}",
        is_probe=rid.endswith("0"),
        prompt_len=prompt_len,
        output_len=out,
        arrival_s=0.0,
        finish_s=1.0,
        finish_reason="stop",
    )


def _record(requests: tuple[RequestRecord, ...]) -> RolloutRecord:
    chunk = ChunkRecord(
        request_id="x",
        group_id="x",
        instance=0,
        chunk_seq=0,
        dispatched_s=0.0,
        start_s=0.0,
        end_s=1.0,
        num_new_tokens=1,
        prompt_len=1,
        generated_before=0,
        num_reprefilled_tokens=0,
        finish_reason="stop",
    )
    return RolloutRecord(
        policy="p",
        num_instances=1,
        chunks=(chunk,),
        requests=requests,
        instances=(),
        makespan_s=1.0,
    )


def test_workload_from_trace_replays_groups_and_lengths() -> None:
    reqs = (
        _request("b-0", "b", 5, 40),
        _request("a-0", "a", 3, 7),
        _request("b-1", "b", 5, 50),
        _request("a-1", "a", 3, 9),
    )
    w = workload_from_trace(_record(reqs), seed=4)
    assert w.group_size == 2 and w.max_new_tokens == 50
    assert [p.prompt_id for p in w.prompts] == ["prompt-b", "prompt-a"]
    assert [p.target_lens for p in w.prompts] == [(40, 50), (7, 9)]
    assert [len(p.token_ids) for p in w.prompts] == [5, 3]
    assert w == workload_from_trace(_record(reqs), seed=4)


def test_workload_from_trace_rejects_uneven_groups() -> None:
    reqs = (_request("a-0", "a", 3, 7), _request("a-1", "a", 3, 9), _request("b-0", "b", 5, 4))
    with pytest.raises(ValueError, match="different sizes"):
        workload_from_trace(_record(reqs))

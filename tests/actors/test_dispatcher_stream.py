"""The scheduler's side of direct dispatch, without sockets: a task's metadata survives the
wire, the scorer is found (or refused with a typed error), and a finished request becomes
the arrays a rank trains on."""

from __future__ import annotations

import numpy as np
import pytest

from actors.dispatcher.stream import StreamError, load_scorer, sample_data
from pipeline.tasks import get_task
from pipeline.tasks.base import TaskPrompt
from pipeline.tasks.scoring import prompt_meta
from transport.codec import decode, encode
from transport.messages import RequestSpec, SamplingSpec, StreamToRanks

SCORER = "pipeline.tasks.scoring:task_reward"


def test_the_scheduler_scores_as_the_driver_does_after_the_wire() -> None:
    task = get_task("countdown")
    prompts = task.sample_prompts(6, np.random.default_rng(0))
    announce = StreamToRanks(
        rollout_id="r0", iteration=3, num_ranks=2, group_size=4,
        task="countdown", prompts=tuple(prompt_meta(f"p{i}", p) for i, p in enumerate(prompts)),
    )  # fmt: skip
    got = decode(encode(announce))
    assert got == announce
    reward = load_scorer(SCORER, "countdown")
    rng = np.random.default_rng(1)
    for sent, prompt in zip(got.prompts, prompts, strict=True):
        walk = task.sft_example(prompt, rng)  # a valid answer: reward 1
        wrong = [*walk[:-2], walk[-1]]  # a step skipped: partial credit or 0
        for completion in (walk, wrong):
            expected = task.reward(prompt, completion)
            assert reward(sent.prompt_id, sent.meta, prompt.token_ids, completion) == expected
        assert reward(sent.prompt_id, sent.meta, prompt.token_ids, walk) == 1.0


def test_meta_the_wire_cannot_carry_and_unknown_scorers_are_typed_errors() -> None:
    with pytest.raises(TypeError, match="nested"):
        prompt_meta("p", TaskPrompt(prompt_id="p", token_ids=(1,), meta={"nested": [[1]]}))
    with pytest.raises(TypeError, match="obj"):
        prompt_meta("p", TaskPrompt(prompt_id="p", token_ids=(1,), meta={"obj": object()}))
    meta = {"n": np.int64(5), "xs": [np.int64(1), 2], "name": "a", "f": 0.5}
    sent = prompt_meta("p", TaskPrompt(prompt_id="p", token_ids=(1,), meta=meta))
    assert sent.meta == {"n": 5, "xs": (1, 2), "name": "a", "f": 0.5}
    with pytest.raises(StreamError, match="no task"):
        load_scorer(SCORER, "no-such-task")
    with pytest.raises(StreamError, match="cannot be imported"):
        load_scorer("pipeline.tasks.scoring:nothing_here", "countdown")
    with pytest.raises(StreamError, match=r"package\.module:function"):
        load_scorer("no_colon", "countdown")


def test_a_finished_request_becomes_prompt_plus_completion_arrays() -> None:
    spec = RequestSpec(
        request_id="g0.1", group_id="g0", prompt_id="p0", index=1, is_probe=False,
        prompt_ids=(5, 6, 7), sampling=SamplingSpec(),
    )  # fmt: skip
    data = sample_data(spec, [8, 9], [-0.5, -1.5], (2, 2), reward=0.25)
    assert data.token_ids.tolist() == [5, 6, 7, 8, 9] and data.token_ids.dtype == np.int32
    assert data.loss_mask.tolist() == [0, 0, 0, 1, 1]
    assert data.old_logprobs.tolist() == [0.0, 0.0, 0.0, -0.5, -1.5]
    assert (data.prompt_len, data.reward, data.weight_versions) == (3, 0.25, (2, 2))


def test_the_scorer_locates_a_failed_samples_mistake_for_step_credit() -> None:
    """Step credit on the direct path: the scheduler's scorer finds the same first wrong
    token as the driver would, and the arrays carry it to the rank (-1 for a right answer)."""
    task = get_task("countdown")
    prompt = task.sample_prompts(1, np.random.default_rng(2))[0]
    sent = prompt_meta("p0", prompt)
    scorer = load_scorer(SCORER, "countdown")
    walk = task.sft_example(prompt, np.random.default_rng(3))
    wrong = [walk[0] + 1, *walk[1:]]  # the first step goes up: token 0 is the mistake
    spec = RequestSpec(
        request_id="p0.0", group_id="p0", prompt_id="p0", index=0, is_probe=False,
        prompt_ids=prompt.token_ids, sampling=SamplingSpec(),
    )  # fmt: skip
    for completion, index in ((walk, -1), (wrong, 0)):
        reward = scorer(sent.prompt_id, sent.meta, prompt.token_ids, completion)
        got = scorer.error_index(sent.prompt_id, sent.meta, prompt.token_ids, completion, reward)
        assert got == index
        data = sample_data(spec, completion, [0.0] * len(completion), (0,), reward, got)
        assert data.error_index == index


def test_the_rollout_record_lists_requests_in_arrival_order_not_finish_order() -> None:
    from actors.scheduler.runbook import RunBook
    from pipeline.sim.workload import from_record
    from transport.messages import ChunkFinished, LoadInfo

    specs = [
        RequestSpec(
            request_id=f"g{g}.0",
            group_id=f"g{g}",
            prompt_id=f"p{g}",
            index=0,
            is_probe=True,
            prompt_ids=(1, 2),
            sampling=SamplingSpec(),
        )
        for g in (0, 1, 2, 10, 11)
    ]
    load = LoadInfo(
        instance=0, num_running=0, num_waiting=0, num_parked=0, kv_tokens_used=0,
        kv_tokens_total=100, max_running=4, weight_version=0,
    )  # fmt: skip
    book = RunBook("r", "baseline", specs, [load], 0.0)
    book.arrive([s.request_id for s in specs], 0.0)
    for n, g in enumerate((11, 2, 0, 10, 1)):  # finishing in another order
        msg = ChunkFinished(
            rollout_id="r", request_id=f"g{g}.0", chunk_seq=0, instance=0, token_ids=(3,),
            logprobs=(0.0,), finish_reason="stop", weight_version=0, start_time=n,
            end_time=n + 0.5, num_cached_tokens=0, load=load,
        )  # fmt: skip
        book.add_chunk(msg, float(n))
    record = book.record([load])
    arrived = ["g0.0", "g1.0", "g2.0", "g10.0", "g11.0"]
    assert [r.request_id for r in record.requests] == arrived
    # a replay admits them in that order (sorting ties by id put g10 before g1)
    assert [r.request_id for r in from_record(record, 8)] == arrived

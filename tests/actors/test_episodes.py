"""Multi-turn episodes, the pure parts: the scheduler core holds a request between turns
and resumes it sticky to its KV, never past its turn's tokens; the episode book's budgets
and reasons; the environment actor's observation checks and cuts."""

from __future__ import annotations

import pytest

from actors.environment import BadObservation, StepResult, cut, load_factory, observation_ids
from actors.environment.api import EnvironmentLoadError
from actors.environment.core import step_result
from actors.scheduler import InstanceLoad, RequestState, SchedulerCore, make_policy
from actors.scheduler.episodes import Episodes
from transport.messages import EnvironmentResult, EpisodeSpec, RequestSpec, SamplingSpec


def _core(policy: str = "context_aware") -> SchedulerCore:
    core = SchedulerCore(
        make_policy(policy, num_instances=2, max_new_tokens=50),
        2,
        chunk_size=4,
        max_running_per_instance=4,
        affinity_spread=2,
    )
    for i in range(2):
        load = InstanceLoad(
            index=i, num_running=0, num_waiting=0, kv_tokens_used=0, kv_tokens_total=10_000,
            max_running=4,
        )  # fmt: skip
        core.update_load(load)
    return core


def _req(rid: str, turn_limit: int = 3) -> RequestState:
    return RequestState(request_id=rid, group_id="g", is_probe=False, prompt_len=5,
                        max_new_tokens=50, arrival=0, turn_limit=turn_limit)  # fmt: skip


@pytest.mark.parametrize("policy", ["baseline", "divided", "context_aware"])
def test_a_turn_is_held_then_resumed_where_its_kv_is(policy: str) -> None:
    core = _core(policy)
    core.add([_req("a")], 0.0)
    [d] = core.next_dispatches(0.0)
    assert d.max_chunk_tokens == 3  # the turn's 3 tokens cap the chunk (chunk_size 4)
    assert core.on_chunk_finished("a", d.instance, d.chunk_seq, 3, False, 1.0) == "ok"
    core.hold("a")  # at its environment: not dispatched, its KV home kept
    assert core.next_dispatches(1.0) == [] and core.request("a").status == "environment"
    assert core.working_set(d.instance) == (1, 8)
    core.resume("a", 4, 2.0)  # 4 observation tokens join the context
    assert core.working_set(d.instance) == (1, 12)
    [again] = core.next_dispatches(2.0)
    assert again.instance == d.instance and again.max_chunk_tokens == 3  # a new turn
    assert core.request("a").generated == 7
    core.on_chunk_finished("a", again.instance, again.chunk_seq, 3, False, 3.0)
    core.hold("a")
    core.finish_held("a")
    assert core.is_done and core.working_set(d.instance) == (0, 0)


@pytest.mark.parametrize("sticky", [True, False])
def test_without_sticky_turns_a_turn_is_placed_as_a_fresh_request(sticky: bool) -> None:
    core = SchedulerCore(
        make_policy("baseline", num_instances=2, max_new_tokens=50), 2, chunk_size=4,
        max_running_per_instance=4, sticky_turns=sticky,
    )  # fmt: skip
    core.add([_req("a"), _req("b")], 0.0)  # one group: the baseline pins both to instance 0
    first = core.next_dispatches(0.0)
    assert [d.instance for d in first] == [0, 0]
    core.on_chunk_finished("a", 0, first[0].chunk_seq, 3, False, 1.0)
    core.hold("a")
    core.resume("a", 2, 2.0)  # "b" still runs on instance 0
    assert core.working_set(0)[0] == (2 if sticky else 1)  # no KV home kept without stickiness
    [again] = core.next_dispatches(2.0)
    assert again.request_id == "a" and again.instance == (0 if sticky else 1)
    core.on_chunk_finished("a", again.instance, again.chunk_seq, 3, False, 3.0)
    core.hold("a")
    core.resume("a", 2, 4.0)  # later turns too; the pin still holds with stickiness
    [third] = core.next_dispatches(4.0)
    assert third.instance == (0 if sticky else 1)  # fresh: least-loaded (instance 1 is idle)


def test_hold_and_resume_refuse_a_request_in_the_wrong_state() -> None:
    core = _core()
    core.add([_req("a")], 0.0)
    with pytest.raises(ValueError, match="not held: cannot resume"):
        core.resume("a", 1, 0.0)
    core.hold("a")
    with pytest.raises(ValueError, match="is environment, not waiting"):
        core.hold("a")
    with pytest.raises(ValueError, match="leave nothing"):
        core.resume("a", 50, 0.0)  # the whole budget: no room for an action


def _spec(rid: str, max_turns: int = 2) -> RequestSpec:
    return RequestSpec(
        request_id=rid, group_id="g", prompt_id="p", index=0, is_probe=True, prompt_ids=(1, 2),
        sampling=SamplingSpec(max_new_tokens=30),
        episode=EpisodeSpec(environment="m:f", max_turns=max_turns),
    )  # fmt: skip


def _answer(rid: str, turn: int, **kw: object) -> EnvironmentResult:
    return EnvironmentResult(rollout_id="r", request_id=rid, turn=turn, instance=0, **kw)  # type: ignore[arg-type]


def test_the_episode_book_keeps_masks_turns_rewards_and_reasons() -> None:
    book = Episodes([_spec("a"), _spec("b")], num_envs=2, timeout_s=5.0)
    assert (book.place("a"), book.place("b")) == (0, 1)  # the least loaded actor
    book.wait("a", 0.0)
    assert book.on_result(_answer("a", 0, observation_ids=(9, 9)), 30) == "step"
    book.observed("a", 2, 2)
    assert book.turn_end("a", "chunk", 2, turn_full=False, budget_full=False) == "no"
    book.on_chunk("a", 2, 7)
    assert book.turn_end("a", "stop", 1, turn_full=False, budget_full=False) == "step"
    book.on_chunk("a", 1, 7)
    assert book.action("a", (9, 9, 5, 6, 7)) == (5, 6, 7)
    assert book.on_result(_answer("a", 1, reward=1.0), 30) == "stale"  # not awaited yet
    book.wait("a", 1.0)
    assert book.overdue(10.0) == [0]  # its actor did not answer in time
    assert book.on_result(_answer("a", 1, reward=1.0, observation_ids=(8,)), 30) == "step"
    book.observed("a", 1, 6)
    assert book.turn_end("a", "stop", 2, turn_full=False, budget_full=False) == "step"
    book.on_chunk("a", 2, 7)
    assert book.action("a", (9, 9, 5, 6, 7, 8, 1, 2)) == (1, 2)
    book.wait("a", 2.0)
    assert book.on_result(_answer("a", 2, reward=0.5), 30) == "end"  # max_turns 2
    assert book.ended("a") == "max_turns"
    result = book.result("a")
    assert result.loss_mask == (0, 0, 1, 1, 1, 0, 1, 1)
    assert result.token_versions == (-1, -1, 7, 7, 7, -1, 7, 7)
    assert result.turn_ends == (5, 8) and result.stop_reasons == ("stop", "stop")
    assert result.step_rewards == (1.0, 0.5) and result.reward == 1.5
    # b: its environment actor is lost while it waits: it ends "env_lost", scored 0
    book.wait("b", 0.0)
    assert book.lose_env(1) == ["b"] and book.env_of("b") is None
    book.lose("b", "env_lost")
    assert book.ended("b") == "env_lost" and book.result("b").reward == 0.0
    assert book.counts == {"stale_env_results": 1, "episodes_max_turns": 1, "episodes_env_lost": 1}


def test_an_observation_that_leaves_no_room_ends_the_episode() -> None:
    book = Episodes([_spec("a", max_turns=5)], num_envs=1, timeout_s=5.0)
    book.wait("a", 0.0)
    assert book.on_result(_answer("a", 0, observation_ids=(1,) * 10), 10) == "end"
    assert book.ended("a") == "length"
    book = Episodes([_spec("a", max_turns=5)], num_envs=1, timeout_s=5.0)
    book.wait("a", 0.0)
    assert book.on_result(_answer("a", 0, failure="env_timeout", error="slow"), 30) == "end"
    assert book.result("a").end_reason == "env_timeout"


class _Env:
    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]


def test_observations_must_be_token_ids_or_text() -> None:
    assert observation_ids([1, 2], object(), "e") == (1, 2)
    assert observation_ids("ab", _Env(), "e") == (97, 98)
    for bad, why in [
        ("ab", "has no encode"), ({"a": 1}, "dict, not token ids"), (3, "int, not token ids"),
        ([1, -2], "-2"), ([1, 2.5], "2.5"), ([True], "True"), (b"ab", "bytes"),
    ]:  # fmt: skip
        with pytest.raises(BadObservation, match=why):
            observation_ids(bad, object(), "e")
    assert step_result(([1], 1, True), "e") == StepResult([1], 1.0, True)
    with pytest.raises(BadObservation, match="step returned a list"):
        step_result([1, 2], "e")
    assert cut((1, 2, 3, 4), 3, "right") == ((1, 2, 3), 1)
    assert cut((1, 2, 3, 4), 3, "left") == ((2, 3, 4), 1)
    assert cut((1, 2), 3, "left") == ((1, 2), 0)


def test_a_factory_path_is_checked_by_name() -> None:
    with pytest.raises(EnvironmentLoadError, match=r"'nocolon'.*package\.module:factory"):
        load_factory("nocolon")
    with pytest.raises(EnvironmentLoadError, match="no_such_module_xyz"):
        load_factory("no_such_module_xyz:make")
    assert callable(load_factory("tests.pipeline.multiturn_envs:make_counter_env"))


@pytest.mark.anyio
async def test_an_agent_environment_hands_turns_to_its_agent_and_back() -> None:
    from actors.environment import AgentError, AgentTurns, agent_environment

    seen: list[tuple[int, ...]] = []

    async def agent(turns: AgentTurns, prompt_ids: tuple[int, ...], info: object) -> float:
        seen.append(await turns.generate("ab"))  # text, with the environment's encode
        seen.append(await turns.generate([9]))
        return "high" if seen[-1] == (0,) else 0.5  # type: ignore[return-value]

    env = agent_environment(agent, encode=lambda text: [ord(c) for c in text])
    obs = await env.reset((1, 2), {})
    assert observation_ids(obs, env, "e") == (97, 98)
    assert await env.step((5, 6)) == StepResult(observation=[9])
    assert await env.step((7,)) == StepResult(reward=0.5, done=True)
    assert seen == [(5, 6), (7,)] and env.turns.num_turns == 2
    env = agent_environment(agent)
    await env.reset((1,), {})
    await env.step((5,))
    with pytest.raises(AgentError, match="returned a str, not a reward"):
        await env.step((0,))
    with pytest.raises(AgentError, match=r"step\(\) before reset"):
        await agent_environment(agent).step((1,))

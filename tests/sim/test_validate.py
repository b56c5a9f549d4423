"""`seer sim validate` end to end on a tiny workload: live processes, replay, JSON shape."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from actors.generator.step_log import read_step_times
from pipeline.rollout.live import bench_generator
from pipeline.sim import profile, validate
from tests.sim.test_simulator import COST as H200
from tests.sim.test_simulator import config, workload
from tests.sim.test_steplog import COST, step


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_tiny_validate_run_writes_the_json_shape(tmp_path: Path) -> None:
    gen = bench_generator(True)
    table = profile.profile_engine(
        gen, batches=(1, 4, 16), contexts=(32, 96), prefills=(16, 64), steps=4, twin=True
    )
    assert {r["kind"] for r in table["rows"]} == {"decode", "prefill"}
    table_path = tmp_path / "table.json"
    table_path.write_text(json.dumps(table))
    out = tmp_path / "sim-validate.json"
    validate.run(str(out), size="tiny", seeds=1, table=str(table_path))
    data = json.loads(out.read_text())
    names = {"baseline", "divided", "context_aware", "oracle"}
    assert set(data["policies"]) == names | {n + "+drafts" for n in names}
    for p in data["policies"].values():
        keys = {"live_makespan_s", "sim_makespan_s", "makespan_err", "live_tail_s"}
        assert keys | {"sim_tail_s", "tail_err"} <= set(p)
        assert p["live_makespan_s"] > 0 and p["sim_makespan_s"] > 0
    assert isinstance(data["ranking_match"], bool)
    assert data["step_time_err"] >= 0 and data["teacher_forced"]["num_steps"] > 0
    assert data["cost_table_info"]["twin"] == {"batch": 8, "ctx": 96}  # checked with it too
    assert data["table_source"] == "fixed" and data["fixed_table"] is None  # --table given
    # the live generators logged their steps: priced by the table, and their time outside
    # engine calls measured (and given to the simulator)
    live_steps = data["live_step_time"]
    assert live_steps["num_steps"] > 0 and data["step_time_err"] == live_steps["step_time_err"]
    lat, _ = data["latencies_s"]  # one per block: without and with drafts
    assert lat["step_overhead_s"] > 0 and lat["num_gaps"] > 0 and lat["start"] > 0
    split = data["policies"]["baseline"]["live_time_split"]
    assert 0 < split["engine_s"] < split["span_s"]
    assert len(list((tmp_path / "steps" / "seed0").glob("steps-gen*.jsonl"))) == 2
    # each speculating generator recorded the T(B, g) its policy priced drafts by (the
    # replay's policies read it); without speculation there is none
    assert not list((tmp_path / "steps" / "seed0").glob("step-times-gen*.json"))
    times = read_step_times(tmp_path / "steps" / "seed0+drafts")
    # the warm-up rollout's decoding steps, which the live policies counted before the first
    # configuration (the replay's fresh policies count them too)
    _, prelude = validate._step_logs(tmp_path / "steps" / "seed0+drafts")
    warm = [r for b in prelude.values() for r in b]
    assert warm and min(warm) >= 1
    assert sorted(times) == [0, 1]
    for rows in times.values():
        assert {(b, g) for b, g, _ in rows} == {
            (b, g) for b in range(1, gen["max_batch"] + 1) for g in range(9)
        }
        assert all(t > 0 for _, _, t in rows)
    assert Path(data["timeline_png"]).stat().st_size > 0
    assert len(list(tmp_path.glob("trace-*-seed0.json"))) == 8
    # every run's output tokens beside its trace; the +drafts replays drafted from them
    tokens = json.loads((tmp_path / "tokens-divided+drafts-seed0.json").read_text())
    trace = json.loads((tmp_path / "trace-divided+drafts-seed0.json").read_text())
    lens = {r["request_id"]: r["output_len"] for r in trace["requests"]}
    assert {k: len(v) for k, v in tokens.items()} == lens
    assert data["temperature"] == validate.TEMPERATURE
    assert data["acceptance"]["source"] == "recorded"
    drafted = [data["policies"][n + "+drafts"] for n in names]
    # the siblings repeat each other at this temperature: drafts hold, live and replayed
    assert max(p["live_accept_len"] for p in drafted) > 1.0
    assert max(p["sim_accept_len"] for p in drafted) > 1.0
    for n in names:  # no speculation: one token per verify step, live and simulated
        assert data["policies"][n]["sim_accept_len"] == pytest.approx(1.0, abs=0.05)
        assert data["policies"][n]["live_accept_len"] == pytest.approx(1.0, abs=0.05)
    # the diagnostic replay, each instance at the speed its own logged steps ran
    assert all(p["norm_makespan_s"] > 0 for p in data["policies"].values())
    assert data["median_norm_makespan_err"] >= 0 and "norm_ranking_match" in data
    assert all(p["paced_makespan_s"] > 0 for p in data["policies"].values())
    assert data["config_pool"] is None  # one seed: no other seed's runs to draw from
    assert data["median_paced_makespan_err"] >= 0 and data["median_paced_tail_err"] >= 0
    assert 0 < live_steps["cpu_over_wall"] <= 1.05
    assert len(live_steps["per_run_predicted_over_measured"]) == 2 * 8  # generators x configs


def test_instance_speeds_are_each_generators_time_over_the_tables_price() -> None:
    fast = [step(0.0, 0.004, rows=4, ctx=32)]  # the table's price: 4 ms
    slow = [step(0.0, 0.010, rows=4, ctx=32), step(1.0, 0.002, rows=4, ctx=32)]
    assert validate.instance_speeds([fast, slow], COST, 2) == pytest.approx((1.0, 1.5))
    assert validate.instance_speeds([fast], COST, 2) == pytest.approx((1.0, 1.0))  # no log


def _block(seed: int, *durations: float, suffix: str = "") -> validate._Block:
    """A seed's block whose generators each logged one 4-row step (the table: 4 ms)."""
    runs = [[step(0.0, d, rows=4, ctx=32)] for d in durations]
    return validate._Block(seed, suffix, None, {}, {"baseline": runs})  # type: ignore[arg-type]


def test_cost_factors_pool_the_other_seeds_rollouts_with_the_same_setting() -> None:
    blocks = [_block(0, 0.004, 0.008), _block(1, 0.004, 0.004), _block(2, 0.012, 0.004)]
    # with drafts the topology ran slower: its own pools, never mixed with the others
    blocks += [_block(s, 0.02, 0.02, suffix="+drafts") for s in (0, 1)]
    blocks += [_block(3, 0.004, suffix="+drafts")]  # a generator logged nothing: left out
    blocks[-1].steps["baseline"].append([])
    blocks += [_block(4, 0.004)]  # a generator lost in the rollout: no log at all, left out
    pools = validate.cost_factors(blocks, COST)
    assert all(len(factors) == 2 for pool in pools.values() for factors in pool)
    # seed 0 is priced by seeds 1 and 2 only, seed 1 by 0 and 2: whole rollouts, in order
    assert pools["0"] == [pytest.approx((1.0, 1.0)), pytest.approx((3.0, 1.0))]
    assert pools["1"] == [pytest.approx((1.0, 2.0)), pytest.approx((3.0, 1.0))]
    assert pools["0+drafts"] == pools["1+drafts"] == [pytest.approx((5.0, 5.0))]
    assert validate.pool_key(blocks[3]) == "0+drafts"
    # around the table's level: over the median of the pool's factors (seed 1's: 1.5)
    assert validate.centred(pools["0"]) == [pytest.approx((1.0, 1.0)), pytest.approx((3.0, 1.0))]
    assert validate.centred(pools["1"]) == [
        pytest.approx((2 / 3, 4 / 3)),
        pytest.approx((2.0, 2 / 3)),
    ]
    assert validate.cost_factors(blocks[:1], COST) == {}  # one seed: no other to pool


def test_cost_factors_by_configuration_pool_only_that_configurations_runs() -> None:
    blocks = [_block(s, 0.004 * (s + 1), 0.004) for s in range(3)]
    for s, block in enumerate(blocks):  # a second configuration, twice as slow
        block.steps["divided"] = [[step(0.0, 0.008 * (s + 1), rows=4, ctx=32)]] * 2
    pools = validate.cost_factors(blocks, COST, by="config")
    assert set(pools) == {f"{s}:{p}" for s in range(3) for p in ("baseline", "divided")}
    assert pools["0:baseline"] == [pytest.approx((2.0, 1.0)), pytest.approx((3.0, 1.0))]
    assert pools["0:divided"] == [pytest.approx((4.0, 4.0)), pytest.approx((6.0, 6.0))]
    assert validate.pool_key(blocks[0], "divided") == "0:divided"
    # by setting, the two configurations' rollouts pool together
    assert len(validate.cost_factors(blocks, COST)["0"]) == 4


def test_speed_draws_repeat_and_a_slower_pool_takes_longer() -> None:
    reqs, cfg = workload(), config()
    n = cfg.num_instances
    pool = [(0.7,) * n, (1.0,) + (1.6,) * (n - 1), (1.6,) * n]
    even = validate._drawn(reqs, "context_aware", cfg, H200, None, [(1.0,) * n], (0, 1, 0))
    uneven = validate._drawn(reqs, "context_aware", cfg, H200, None, pool, (0, 1, 0))
    assert uneven == validate._drawn(reqs, "context_aware", cfg, H200, None, pool, (0, 1, 0))
    assert uneven != validate._drawn(reqs, "context_aware", cfg, H200, None, pool, (1, 1, 0))
    with pytest.raises(ValueError, match=f"{n} cost factors"):  # a draw prices every instance
        validate._drawn(reqs, "context_aware", cfg, H200, None, [(1.0,)] * n, (0, 1, 0))
    assert len(even[0]) == len(uneven[0]) == validate.DRAWS
    assert len(set(even[0])) == 1  # one factor: every draw the same replay
    # a draw is one rollout's factors together: never one from each of two rollouts
    together = [(1.0,) * n, (2.0,) * n]
    spans, _ = validate._drawn(reqs, "context_aware", cfg, H200, None, together, (0, 1, 0))
    apart = {
        validate._at_speeds(reqs, "context_aware", cfg, H200, None, f)["makespan_s"]
        for f in together
    }
    assert set(spans) == apart
    # the rollout waits for the slower instance
    assert statistics.median(uneven[0]) > statistics.median(even[0])


def test_noise_floor_is_how_far_a_median_of_single_draws_lands() -> None:
    assert validate.noise_floor([[1.0] * 3, [2.0] * 3, [3.0] * 3]) == 0.0  # no spread
    # each seed's draws 1 or 3 (medians 2): the median of one draw per seed is 1 or 3
    assert validate.noise_floor([[1.0, 3.0]] * 3) == pytest.approx(0.5)
    assert validate.noise_floor([[1.0, 1.5, 2.0]]) == pytest.approx(1 / 3)  # 2 in 3 miss


def test_worst_noise_floor_is_the_largest_error_of_each_resampling() -> None:
    # one seed drawing 1, 1 or 2 (median 1): its error is 0 two times in three, so its
    # floor is 0; the worse of two such configurations is 1 five times in nine
    assert validate.noise_floor([[1.0, 1.0, 2.0]]) == 0.0
    assert validate.worst_noise_floor([[[1.0, 1.0, 2.0]]] * 2) == pytest.approx(1.0)
    # one configuration: the worst is its own floor
    assert validate.worst_noise_floor([[[1.0, 3.0]] * 3]) == pytest.approx(0.5)
    assert validate.worst_noise_floor([[[2.0] * 3] * 3, [[1.0, 3.0]] * 3]) == pytest.approx(0.5)


def test_sign_test_is_exact_and_two_sided() -> None:
    assert validate.sign_test(0, 0) == 1.0
    assert validate.sign_test(9, 9) == pytest.approx(2 / 512)
    assert validate.sign_test(1, 9) == validate.sign_test(8, 9) == pytest.approx(20 / 512)
    assert validate.sign_test(2, 9) == pytest.approx(2 * 46 / 512)  # > 0.05: not resolved
    assert validate.sign_test(3, 6) == 1.0
    assert validate.MIN_RESOLVING_SEEDS == 6  # 5 of 5: p = 1/16; 6 of 6: 1/32


def test_resolved_ranking_pairs_seeds_and_asks_a_sign_test() -> None:
    def p(live: list[float], sim: float) -> dict[str, object]:
        return {
            "live_makespans_s": live,
            "live_makespan_s": statistics.median(live),
            "sim_makespan_s": sim,
        }

    # a beats b on 8 of 9 seeds although their ranges overlap (seed 3's workload is long);
    # c beats a and b on 6 of 9 each: not resolved
    a = [1.0, 1.1, 1.2, 3.0, 1.1, 1.0, 1.3, 1.2, 2.0]
    b = [x + 0.1 for x in a[:8]] + [1.9]
    c = [x - 0.05 for x in a[:6]] + [x + 0.5 for x in a[6:]]
    policies = {"a": p(a, 5.0), "b": p(b, 4.0), "c": p(c, 5.1)}
    out = validate._resolved_ranking(policies)  # only a-b is resolved: the simulator flips it
    assert (out["num_resolved_pairs"], out["resolved_pairs_agree"]) == (1, 0)
    assert out["resolved_ranking_match"] is False and out["num_pairs"] == 3
    assert out["chance_resolved_pairs"] == pytest.approx(3 * 20 / 512)
    policies["a"]["sim_makespan_s"] = 3.0  # now it agrees
    assert validate._resolved_ranking(policies)["resolved_ranking_match"] is True
    # three seeds can resolve nothing, even when one configuration wins on every seed:
    # nothing was checked, so no verdict
    three = {k: {**v, "live_makespans_s": v["live_makespans_s"][:3]} for k, v in policies.items()}
    out = validate._resolved_ranking(three)
    assert out["num_resolved_pairs"] == 0 and out["resolved_ranking_match"] is None
    assert out["chance_resolved_pairs"] == 0.0
    uneven = {**policies, "b": {**policies["b"], "live_makespans_s": b[:5]}}
    with pytest.raises(ValueError, match="not paired"):
        validate._resolved_ranking(uneven)


TINY_GRID = {
    "batches": (1, 4, 16),
    "contexts": (32, 96),
    "prefills": (16, 64),
    "steps": 4,
    "passes": 1,
}


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_tiny_validate_measures_its_table_between_the_live_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(profile, "grid", lambda quick, twin=True: {**TINY_GRID, "twin": twin})
    monkeypatch.setenv("SEER_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "sim-validate.json"
    validate.run(str(out), size="tiny", seeds=2, drafts=False)
    data = json.loads(out.read_text())
    assert data["table_source"] == "interleaved"
    # one pass before the live runs and one after each seed's block
    info = data["cost_table_info"]
    assert info["passes"] == 3 and info["twin"] == {"batch": 8, "ctx": 96}
    table = json.loads((tmp_path / "profile-interleaved.json").read_text())
    assert data["cost_table"] == str(tmp_path / "profile-interleaved.json")
    assert {(r["B"], r["ctx"]) for r in table["rows"] if r["kind"] == "decode"} == {
        (b, c) for b in (1, 4, 16) for c in (32, 96)
    }
    # the same replays priced by the cached table, measured once before
    fixed = data["fixed_table"]
    assert fixed["cost_table"].startswith(str(tmp_path / "cache"))
    assert fixed["median_makespan_err"] >= 0 and isinstance(fixed["ranking_match"], bool)
    assert fixed["step_time_err"] >= 0
    assert all(len(p["live_makespans_s"]) == 2 for p in data["policies"].values())
    # each seed's replays drew instance speeds from the other seed's generators
    assert set(data["cost_factor_pools"]) == {"0", "1"}
    # the other seed's four rollouts, each both generators' factors
    assert all(len(v) == 4 for v in data["cost_factor_pools"].values())
    assert all(len(f) == 2 for v in data["cost_factor_pools"].values() for f in v)
    for p in data["policies"].values():
        assert p["makespan_err"] == pytest.approx(
            abs(p["sim_makespan_s"] - p["live_makespan_s"]) / p["live_makespan_s"]
        )
        assert p["uniform_makespan_s"] > 0 and p["per_seed_makespan_err"] >= 0
        assert p["table_makespan_s"] > 0 and p["table_makespan_err"] >= 0
        assert 0 <= p["noise_floor_makespan_err"] < 1
    assert data["median_noise_floor_makespan_err"] is not None
    # drawn per configuration: each from the other seed's run of that configuration
    by_config = data["config_pool"]
    assert set(by_config["policies"]) == set(data["policies"])
    assert 0 <= by_config["median_makespan_err"] <= by_config["worst_makespan_err"]
    assert by_config["policies"][by_config["worst_config"]]["makespan_err"] == pytest.approx(
        by_config["worst_makespan_err"]
    )


def test_the_command_line_passes_the_table_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.cli.main import main

    calls: list[dict[str, object]] = []
    monkeypatch.setattr(validate.command, "run", lambda *a, **kw: calls.append(kw))
    assert main(["sim", "validate", "--quick"]) == 0
    assert main(["sim", "validate", "--quick", "--fixed-table", "--seeds", "5"]) == 0
    assert calls[0]["interleave"] is True and calls[1]["interleave"] is False
    assert calls[1]["seeds"] == 5 and calls[1]["quick"] is True
    assert calls[0]["temperature"] == validate.TEMPERATURE
    assert main(["sim", "validate", "--temperature", "1.0"]) == 0
    assert calls[2]["temperature"] == 1.0


def test_validate_refuses_a_negative_temperature_before_any_work(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="temperature must be >= 0"):
        validate.run(str(tmp_path / "v.json"), size="tiny", temperature=-1.0)
    assert not list(tmp_path.iterdir())


def test_instance_paces_are_window_by_window_on_the_traces_clock() -> None:
    from transport.messages import ChunkRecord, RolloutRecord

    def chunk_at(instance: int, start: float) -> ChunkRecord:
        return ChunkRecord(
            request_id=f"r{instance}", group_id="g", instance=instance, chunk_seq=0,
            dispatched_s=start, start_s=start, end_s=start + 1, num_new_tokens=1,
            prompt_len=4, generated_before=0, num_reprefilled_tokens=0, finish_reason="length",
        )  # fmt: skip

    record = RolloutRecord(
        policy="baseline",
        num_instances=2,
        chunks=(chunk_at(0, 0.01), chunk_at(1, 0.02)),
        requests=(),
        instances=(),
        makespan_s=1.0,
    )
    t0 = 1000.0  # the step log's wall clock: the rollout's clock started at 1000
    gen0 = [step(t0 + 0.01 + 0.01 * i, 0.004, rows=4, ctx=32) for i in range(20)]  # 1x
    gen0 += [step(t0 + 0.5 + 0.01 * i, 0.008, rows=4, ctx=32) for i in range(20)]  # 2x
    gen1 = [step(t0 + 0.02 + 0.01 * i, 0.006, rows=4, ctx=32) for i in range(75)]  # 1.5x
    gen1.append(step(t0 + 0.9, 0.012, rows=4, ctx=32))  # one 3x step: too little alone
    paces = validate.instance_paces([gen0, gen1], record, COST, 2, window_s=0.25)
    assert [t for t, _ in paces[0]] == [0.0, 0.25, 0.5]
    assert [f for _, f in paces[0]] == pytest.approx([1.0, 1.5, 2.0])  # the gap: whole
    # windows the table prices under a fifth of their span take the whole-rollout factor
    assert [f for _, f in paces[1]] == pytest.approx([1.5, 1.5, 1.5, 0.462 / 0.304])

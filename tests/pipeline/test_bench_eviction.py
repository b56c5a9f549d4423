from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from actors.generator.builtin import build_torch_engine
from actors.generator.options import GeneratorOptions
from actors.options import ConfigError
from pipeline.bench.eviction import POLICIES, run


def test_the_option_reaches_the_engine_and_sglang_refuses_it() -> None:
    for rule in ("lru", "queue"):
        opts = GeneratorOptions(parked_eviction=rule, max_batch=2)
        engine = build_torch_engine(opts.model, opts.engine_config())
        assert engine.config.parked_eviction == rule
    with pytest.raises(ConfigError, match="parked_eviction"):
        GeneratorOptions(parked_eviction="fifo")
    with pytest.raises(ConfigError, match="parked_eviction"):
        GeneratorOptions(backend="sglang", parked_eviction="lru")


@pytest.mark.slow
def test_eviction_bench_runs_both_rules_on_the_same_seeds(tmp_path: Path) -> None:
    out = tmp_path / "eviction.json"
    run(str(out), quick=True, repeats=1)
    saved = json.loads(out.read_text())
    assert set(saved["variants"]) == {"lru", "queue"} and saved["seeds"] == 1
    for policy in POLICIES:
        lru, queue = saved["variants"]["lru"][policy], saved["variants"]["queue"][policy]
        assert len(lru["makespan_s"]) == len(queue["makespan_s"]) == 1
        assert all(m > 0 for m in lru["makespan_s"] + queue["makespan_s"])
        assert lru["median_makespan_s"] == statistics.median(lru["makespan_s"])
        ratios = [q / x for q, x in zip(queue["makespan_s"], lru["makespan_s"], strict=True)]
        assert saved["queue_over_lru_makespan"][policy] == pytest.approx(statistics.median(ratios))
        assert all(t >= 0 for t in lru["reprefilled_tokens"] + queue["reprefilled_tokens"])

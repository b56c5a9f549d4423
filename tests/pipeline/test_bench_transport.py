from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.bench.transport import rollout_messages, run
from pipeline.rl.steps import MESSAGE_BYTES
from transport.codec import encode
from transport.messages import TrainStep


@pytest.mark.slow
def test_transport_bench_reports_both_variants(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    result = run(str(out), quick=True)
    assert json.loads(out.read_text()) == result
    small, tensor = result["small_msgs"], result["tensor"]
    assert small["ours_msgs_per_s"] > 0 and small["raw_msgs_per_s"] > 0
    assert small["ratio"] == pytest.approx(small["ours_msgs_per_s"] / small["raw_msgs_per_s"])
    assert 0 < small["p50_us"] <= small["p99_us"]
    assert tensor["ours_MBps"] > 0 and tensor["raw_MBps"] > 0
    rollout = result["rollout"]
    assert (rollout["samples"], rollout["tokens"]) == (64, 1024)  # --quick; full: 512 x 8,192
    assert rollout["ours_s"] > 0 and rollout["raw_s"] > 0
    assert rollout["wire_mib"] > 64 * 1024 * 8 / 2**20  # ids and logprobs: 8 bytes a token
    assert rollout["ours_receiver_peak_mib"] >= 0 and rollout["raw_receiver_peak_mib"] >= 0


def test_a_real_size_rollout_is_sent_in_bounded_messages() -> None:
    """512 x 8,192 tokens: several messages, each under the default limits (16 MiB headers)."""
    msgs = rollout_messages(512, 8192, 512)
    assert len(msgs) > 1 and isinstance(msgs[-1], TrainStep)
    assert sum(len(m.samples) for m in msgs) == 512
    for m in msgs:
        frames = encode(m)  # refused here if over a limit
        assert len(frames[0]) < 1 << 20
        assert all(memoryview(f).nbytes <= MESSAGE_BYTES for f in frames[1:])

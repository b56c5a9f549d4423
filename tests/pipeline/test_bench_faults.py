"""`seer bench faults --quick` on two of its cheap cases, end to end (real actor processes,
ZeroMQ, the misbehaving stand-in generators of `pipeline.bench.faulty`): an aborted chunk
and a chunk result lost on the wire. Both runs go on with no sample lost, and the
scheduler's reaction is timed from the stand-in's `fault_injected` log event: at once for
an abort, at the chunk's deadline for a lost result. No undisturbed `seer run` is made for
these (it is only needed by the signal cases, which their own fault tests cover:
tests/faults/, tests/pipeline/test_netns_rl.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.bench.fault_cases import CASES, DEADLINE_FLOOR_S
from pipeline.bench.faults import FAULTS, run


@pytest.mark.timeout(300)
def test_bench_faults_chunk_cases_continue_without_loss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "faults.json"
    faults = ("aborted_chunk", "dropped_result")
    # a relative folder, as the command's default is: its ipc socket paths stay short under
    # pytest-xdist's deeper tmp_path (a unix socket path has at most 107 characters)
    monkeypatch.chdir(tmp_path)
    summary = run(str(out), quick=True, faults=faults, fuzz_frames=0, folder=".")
    assert json.loads(out.read_text()) == summary
    assert not (tmp_path / "reference").exists()  # no seer run for these cases
    aborted, dropped = summary["faults"]["aborted_chunk"], summary["faults"]["dropped_result"]
    for case in (aborted, dropped):
        assert case["outcome"] == "continues" and case["samples_lost"] == 0, case
        assert case["failed_chunks"] > 0 and case["generators_lost"] == 0, case
        assert case["detect_s"] is not None and case["detect_s"] < 5.0 + DEADLINE_FLOOR_S, case
    # a lost result is noticed at its deadline (not sooner: nothing else says it is lost)
    assert dropped["failed_chunks"] == 2 and dropped["detect_s"] >= DEADLINE_FLOOR_S * 0.9
    assert summary["fuzz"]["frames"] is None  # not asked for here


def test_unknown_faults_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown faults"):
        run(None, faults=("router",), folder=str(tmp_path))
    assert set(FAULTS) >= {"splitter", "estimator", "scheduler", "generator", "drafts"}
    assert set(CASES) >= {"aborted_chunk", "dropped_result", "default_weights", "netns"}

"""`seer bench faults` on two faults: generator 1 SIGKILLed mid-iteration (the run goes on,
no sample lost, the undisturbed run's results) and the trainer SIGKILLed (the run fails
fast with a typed error; `seer run --resume` from the last checkpoint then gives the
undisturbed run's results, trained losses included)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.bench.faults import FAULTS, run


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_bench_faults_generator_continues_and_trainer_resumes(tmp_path: Path) -> None:
    out = tmp_path / "faults.json"
    faults = ("generator", "trainer")
    summary = run(str(out), quick=True, faults=faults, fuzz_frames=0, folder=str(tmp_path))
    assert json.loads(out.read_text()) == summary
    generator = summary["faults"]["generator"]
    assert generator["outcome"] == "continues", generator
    assert generator["samples_lost"] == 0 and generator["results_match_reference"] is True
    assert generator["detect_s"] is not None  # the scheduler logged generator_lost
    trainer = summary["faults"]["trainer"]
    assert trainer["outcome"] == "fails fast, resumes from checkpoint", trainer
    assert trainer["error"] == "PeerGone" and trainer["detect_s"] is not None
    assert trainer["resumed_iterations"] and trainer["resume_identical"] is True
    assert summary["fuzz"]["frames"] is None  # not asked for here


def test_unknown_faults_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown faults"):
        run(None, faults=("router",), folder=str(tmp_path))
    assert set(FAULTS) >= {"splitter", "estimator", "scheduler", "generator", "drafts"}

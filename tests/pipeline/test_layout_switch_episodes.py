"""Earl in the multi-turn setting: the parallelism selector reads episodes' context lengths
(the whole trajectory, observations included, as the trainer sees it) and, in one run
whose episodes grow, switches the generator layout when their context crosses the
profile's bucket: a selector that counted only the sampled tokens, or one turn, would not.
"""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

from pipeline.config import build_options
from pipeline.rl.config import RunConfig
from pipeline.rl.loop import context_lens, score, train
from pipeline.rl.selector import LayoutProfile
from pipeline.rollout.api import Group
from pipeline.tasks import TaskPrompt
from tests.pipeline import growing_episodes as growing
from transport.messages import EpisodeResult, SampleResult

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "tests" / "pipeline" / "growing_episodes.toml"  # the documented command's
SMALL = 24  # growing_profile.json's small bucket: 2 x 1 wins up to 24 tokens, 1 x 2 beyond


def sample(rid: str, tokens: tuple[int, ...], mask: tuple[int, ...] | None) -> SampleResult:
    episode = None
    if mask is not None:
        episode = EpisodeResult(
            loss_mask=mask, token_versions=tuple(0 if m else -1 for m in mask),
            turn_ends=(3, 8), stop_reasons=("stop", "stop"), step_rewards=(0.25, 0.25),
            reward=0.5, end_reason="done",
        )  # fmt: skip
    return SampleResult(
        request_id=rid, group_id="g0", prompt_id="p0", index=0, token_ids=tokens,
        logprobs=(0.0,) * len(tokens), finish_reason="stop", weight_versions=(0,),
        start_s=0.0, end_s=1.0, episode=episode,
    )  # fmt: skip


def test_an_episodes_context_is_its_whole_trajectory_as_the_trainer_sees_it() -> None:
    prompt = TaskPrompt(prompt_id="p0", token_ids=(1, 2, 3), meta={})
    # reset observation (2), action (1), observation (4), action (1): 8 tokens, 2 sampled
    trajectory = (40, 40, 5, 61, 61, 61, 61, 6)
    mask = (0, 0, 1, 0, 0, 0, 0, 1)
    groups = [Group("p0", (sample("r0", trajectory, mask), sample("r1", (7, 7), None)))]
    result = SimpleNamespace(groups=groups, stream=None)
    lens = context_lens([prompt], result)
    assert lens == [3 + 8, 3 + 2]  # not 3 + 2 (the sampled tokens) for the episode
    trained = score(growing.make_task(), [prompt], groups)[0]
    assert lens == [len(s.prompt_ids) + len(s.completion_ids) for s in trained]


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_growing_episodes_switch_the_layout_in_one_run(tmp_path: Path) -> None:
    """Episodes of 1, 4 and 7 turns in iterations 0, 1 and 2 (the growing task): after
    iteration 0 the average context (6-7 tokens) is in the profile's small bucket and the
    layout stays 2 x 1; iteration 1's episodes (57-61 tokens, 48 of them observations) lift
    the running average past 24 and the selector switches to 1 x 2, which iteration 2 runs
    on. Counting only the sampled tokens, the average would stay under 9 and the layout
    would not move."""
    cfg = build_options(RunConfig, tomllib.loads(CONFIG.read_text()), str(CONFIG))
    profile = LayoutProfile.load(ROOT / cfg.layout_profile)
    assert [profile.best(c).name for c in profile.buckets] == ["2x1", "1x2"]
    assert profile.buckets[0] == SMALL
    cfg = dataclasses.replace(
        cfg, layout_profile=str(ROOT / cfg.layout_profile), out_dir=str(tmp_path / "run"),
        mode="inprocess",
    )  # fmt: skip
    rows = await train(cfg)
    assert [r["mean_turns"] for r in rows] == [1, 4, 7]  # the episodes grew
    assert all(r["episode_ends"] == {"done": 16} for r in rows)
    contexts = [r["mean_context_len"] for r in rows]
    assert contexts[0] < contexts[1] < contexts[2]
    assert rows[0]["average_context_len"] <= SMALL < rows[1]["average_context_len"]
    assert [r["layout"] for r in rows] == ["2x1", "2x1", "1x2"]
    assert [r["num_layout_switches"] for r in rows] == [0, 1, 1]
    assert [("layout_switch_s" in r) for r in rows] == [False, True, False]
    assert [r["weight_version"] for r in rows] == [1, 2, 3]  # continuous across the switch
    assert all(r["train_num_samples"] == 16 for r in rows)  # every sample trained on-policy

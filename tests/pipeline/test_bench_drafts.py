"""The pure parts of `seer bench drafts`: acceptance replay and the rollout summary."""

from __future__ import annotations

import pytest

from pipeline.bench import drafts
from pipeline.bench.drafts import (
    _rollout_summary,
    acceptance_table,
    accepted_len,
    replay_acceptance,
)
from transport.messages import SampleResult


def test_accepted_len_follows_the_tree_path_the_truth_takes() -> None:
    chain = ((5, 6, 7), (-1, 0, 1))
    assert accepted_len(*chain, [5, 6, 9]) == 2
    assert accepted_len(*chain, [4]) == 0
    assert accepted_len(*chain, [5, 6, 7, 8]) == 3
    tree = ((5, 4, 6, 3), (-1, -1, 0, 1))  # 5 -> 6 and 4 -> 3
    assert accepted_len(*tree, [4, 3, 1]) == 2
    assert accepted_len(*tree, [5, 3]) == 1
    assert accepted_len(*tree, [5]) == 1  # the response ends inside the draft


def test_replay_siblings_help_and_self_only_cannot_on_a_walk_without_repeats() -> None:
    walk = list(range(100, 40, -1))  # strictly decreasing: never repeats itself
    groups = [((1, 2, 3), [walk, walk, walk])]
    self_only = replay_acceptance(groups, refs=0, paths=1)
    grouped = replay_acceptance(groups, refs=None, paths=1, g_max=8)
    assert self_only["mean_accept_len"] == pytest.approx(1.0)
    # identical siblings: every step accepts all 8 drafted tokens plus the bonus token
    assert grouped["mean_accept_len"] == pytest.approx(60 / 7, rel=0.05)


def test_more_paths_never_accept_less_on_diverging_siblings() -> None:
    a = [10, 9, 8, 7, 6, 5, 4, 3, 2, 1]
    b = [10, 8, 7, 5, 4, 2, 1]
    c = [10, 9, 7, 6, 4, 3, 1]
    groups = [((1,), [a, b, c])]
    rows = {(r["refs"], r["paths"]): r["mean_accept_len"] for r in acceptance_table(groups)}
    assert rows[("all", 4)] >= rows[("all", 1)] >= rows[(0, 1)]


def test_rollout_summary_reports_medians_and_ratios() -> None:
    def m(t: float, a: float) -> dict[str, float]:
        return {
            "throughput_tok_s": t,
            "mean_accept_len": a,
            "makespan_s": 1000 / t,
            "tail_s": 0.1,
            "accept_rate": 0.0,
        }

    runs = {
        "none": [m(100, 1), m(120, 1), m(110, 1)],
        "group": [m(130, 1.5), m(99, 1.4), m(140, 1.6)],
    }
    out = _rollout_summary(runs)
    assert out["none"]["throughput_tok_s"] == 110
    assert out["group"]["throughput_vs_none"] == pytest.approx(130 / 110)
    assert out["group"]["mean_accept_len"] == 1.5


def _sample(prompt: str, index: int, tokens: tuple[int, ...], reason: str = "stop") -> SampleResult:
    return SampleResult(
        request_id=f"{prompt}-{index}",
        group_id=prompt,
        prompt_id=prompt,
        index=index,
        token_ids=tokens,
        logprobs=(0.0,) * len(tokens),
        finish_reason=reason,
        weight_versions=(0,),
        start_s=0.0,
        end_s=1.0,
    )


def test_differing_samples_names_each_variant_that_is_not_lossless() -> None:
    none = (_sample("p0", 0, (1, 2, 3)), _sample("p0", 1, (4, 5)))
    changed = (_sample("p0", 0, (1, 2, 3)), _sample("p0", 1, (4, 6, 7), "length"))
    diff = drafts.differing_samples({"none": none, "self": none, "group_fixed": changed})
    assert set(diff) == {"group_fixed"}  # an identical variant is not listed
    assert diff["group_fixed"]["count"] == 1
    assert diff["group_fixed"]["first"] == [
        {
            "sample": "p0/1",
            "lengths": [2, 3],
            "first_difference_at": 1,
            "finish_reasons": ["stop", "length"],
        }
    ]
    assert drafts.differing_samples({"none": none, "self": none}) == {}

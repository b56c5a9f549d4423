"""The simulator's acceptance table from recorded output: real suffix trees over the
siblings' token streams, by how many siblings are ahead."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.sim.acceptance import acceptance_from_streams, measure_acceptance


def _looping(rng: random.Random, n: int, vocab: int) -> list[int]:
    """Text that repeats a short motif, with a token changed now and then."""
    motif = [rng.randrange(vocab) for _ in range(7)]
    return [motif[i % 7] if rng.random() > 0.05 else rng.randrange(vocab) for i in range(n)]


def test_siblings_that_repeat_each_other_give_long_drafts_and_random_ones_none() -> None:
    rng = random.Random(0)
    alike = []
    for _ in range(3):
        text = [rng.randrange(50) for _ in range(120)]
        alike.append([list(text) for _ in range(4)])  # four identical siblings
    table = acceptance_from_streams(alike)
    assert table.refs == (0, 1, 2, 3)  # every count a group of four allows
    assert table.model is None  # recorded, not a synthetic model
    # alone, the request has seen no later text of its own; with one sibling ahead, every
    # token of a chain of 8 holds
    assert table.expected_tokens(0, 8) < 1.5
    assert table.expected_tokens(1, 8) > 8.5
    noise = [[[rng.randrange(256) for _ in range(200)] for _ in range(4)] for _ in range(3)]
    assert acceptance_from_streams(noise).expected_tokens(3, 8) < 1.1


def test_more_siblings_ahead_help_on_noisy_copies_and_probabilities_rank_them() -> None:
    rng = random.Random(1)
    groups = []
    for _ in range(4):
        base = _looping(rng, 300, 40)
        noisy = [[t if rng.random() > 0.15 else rng.randrange(40) for t in base] for _ in range(4)]
        groups.append(noisy)
    table = acceptance_from_streams(groups)
    lengths = [table.expected_tokens(r, 8) for r in table.refs]
    assert lengths[3] > lengths[0]
    for row in table.accept:  # the chance that at least j tokens hold falls with j
        assert all(a >= b for a, b in itertools.pairwise(row))
    assert table.row(7) == 3  # more siblings than measured: the largest count measured


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.lists(st.lists(st.integers(0, 5), min_size=0, max_size=40), min_size=1, max_size=4),
        min_size=1,
        max_size=3,
    )
)
def test_any_recorded_groups_give_a_well_formed_table_or_a_clear_error(
    groups: list[list[list[int]]],
) -> None:
    if all(len(s) <= 8 for g in groups for s in g):
        with pytest.raises(ValueError, match="longer than g_max"):
            acceptance_from_streams(groups)
        return
    table = acceptance_from_streams(groups)
    assert table.refs == tuple(range(max(len(g) for g in groups)))
    for row in table.accept:
        assert row[0] == 1.0 and all(0.0 <= a <= 1.0 for a in row)


def test_the_synthetic_table_is_the_same_measurement() -> None:
    # refactored into the shared tally: the figures the README quotes are unchanged
    lengths = measure_acceptance().as_dict()["mean_acceptance_length_gmax"]
    assert lengths == {"0": 1.625, "1": 2.049, "2": 2.176, "4": 2.354, "8": 2.415, "15": 2.598}

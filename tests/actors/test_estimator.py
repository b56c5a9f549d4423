"""LengthEstimator: longest finished sibling, generation limit, prior, context average."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actors.estimator import LengthEstimator, UnknownGroupError


def test_estimate_is_longest_finished_sibling() -> None:
    est = LengthEstimator(1000)
    est.open_group("g", "p", group_size=4)
    assert est.estimate("g") == 1000  # nothing finished: the generation limit
    assert est.on_request_finished("g", 120) == 120
    assert est.on_request_finished("g", 80) is None  # shorter: unchanged
    assert est.on_request_finished("g", 300) == 300
    assert est.estimate("g") == 300


def test_finishing_at_the_limit_is_no_change() -> None:
    est = LengthEstimator(1000)
    est.open_group("g", "p", group_size=2)
    assert est.on_request_finished("g", 1000) is None
    assert est.estimate("g") == 1000


def test_prior_from_an_earlier_iteration() -> None:
    est = LengthEstimator(1000, use_prior=True)
    est.open_group("it0", "prompt-7", group_size=2)
    est.on_request_finished("it0", 200)
    est.on_request_finished("it0", 450)
    est.close_group("it0")
    assert est.prior("prompt-7") == 450
    est.open_group("it1", "prompt-7", group_size=2)
    est.open_group("other", "prompt-8", group_size=2)
    assert est.estimate("it1") == 450 and est.estimate("other") == 1000
    assert est.on_request_finished("it1", 100) is None  # "floor": the prior stays a bound
    assert est.estimate("it1") == 450
    assert est.on_request_finished("it1", 600) == 600  # a longer sibling raises it
    est.close_group("it1")
    assert est.prior("prompt-7") == 600


def test_prior_until_finished_drops_it_at_the_first_sibling() -> None:
    est = LengthEstimator(1000, use_prior=True, prior_rule="until_finished")
    est.open_group("it0", "prompt-7", group_size=1)
    est.on_request_finished("it0", 450)
    est.close_group("it0")
    est.open_group("it1", "prompt-7", group_size=2)
    assert est.estimate("it1") == 450
    assert est.on_request_finished("it1", 100) == 100  # a finished sibling beats the prior
    est.close_group("it1")
    assert est.prior("prompt-7") == 100
    with pytest.raises(ValueError, match="prior_rule"):
        LengthEstimator(10, prior_rule="mean")  # type: ignore[arg-type]


def test_prior_unused_unless_enabled() -> None:
    est = LengthEstimator(1000)
    est.open_group("it0", "p", group_size=1)
    est.on_request_finished("it0", 10)
    est.close_group("it0")
    est.open_group("it1", "p", group_size=1)
    assert est.estimate("it1") == 1000


def test_unknown_and_invalid() -> None:
    est = LengthEstimator(100)
    with pytest.raises(UnknownGroupError, match="never opened"):
        est.estimate("nope")
    with pytest.raises(KeyError):
        est.on_request_finished("nope", 1)
    est.open_group("g", "p", group_size=1)
    with pytest.raises(ValueError, match="already open"):
        est.open_group("g", "p", group_size=1)
    est.on_request_finished("g", 5)
    with pytest.raises(ValueError, match="only 1 requests"):
        est.on_request_finished("g", 5)
    est.close_group("g")
    with pytest.raises(UnknownGroupError):
        est.close_group("g")


@given(st.lists(st.integers(0, 500), min_size=1, max_size=16))
def test_estimate_tracks_max_and_reports_changes(lengths: list[int]) -> None:
    est = LengthEstimator(400)
    est.open_group("g", "p", group_size=len(lengths))
    current = 400
    for i, n in enumerate(lengths):
        changed = est.on_request_finished("g", n)
        expected = max(lengths[: i + 1])
        assert est.estimate("g") == expected
        assert changed == (expected if expected != current else None)
        current = expected

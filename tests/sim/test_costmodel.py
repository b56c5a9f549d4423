"""CostModel: grid points exact, interpolation between them, extrapolation past them."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.sim.costmodel import DATA_DIR, CostModel, CostModelError


def test_grid_points_are_the_measured_values() -> None:
    dense = CostModel.builtin("qwen2.5-7b")
    assert dense.decode_s(1, 1024, 0) == pytest.approx(5.5028e-3, rel=0.02)  # SCALE.md: 5.5 ms
    assert dense.decode_s(256, 1024, 0) == pytest.approx(12.6e-3, rel=0.03)
    assert dense.prefill_s(8192) == pytest.approx(0.2292, rel=1e-3)
    moe = CostModel.builtin("moonlight-16b-a3b")
    # MoE: a step grows about 3x from B=1 to B=32; drafts of 8 cost about 2x at B=1
    assert 2.5 < moe.decode_s(32, 1024) / moe.decode_s(1, 1024) < 3.5
    assert 1.8 < moe.decode_s(1, 1024, 8) / moe.decode_s(1, 1024) < 2.2
    assert moe.prefill_s(1000) > 0  # priced from decode rows (no prefill rows in the table)


def test_interpolation_is_monotone_and_extrapolates() -> None:
    m = CostModel.builtin("qwen2.5-32b")
    steps = [m.decode_s(b, 4096) for b in (1, 3, 8, 24, 64, 200)]
    assert steps == sorted(steps)
    assert m.decode_s(16, 1024) < m.decode_s(16, 3000) < m.decode_s(16, 4096)
    assert m.decode_s(16, 1024, 0) < m.decode_s(16, 1024, 3) < m.decode_s(16, 1024, 4)
    # past the grid (B * ctx > 2M): grows with B, about linearly
    assert m.decode_s(512, 32768) > 1.3 * m.decode_s(256, 32768)


def test_bad_tables_raise_typed_errors(tmp_path: Path) -> None:
    with pytest.raises(CostModelError, match="no decode rows"):
        CostModel.from_file(DATA_DIR / "costmodel_h200.json", "llama-405b")
    bad = tmp_path / "t.json"
    bad.write_text("[1, 2]")
    with pytest.raises(CostModelError, match="rows"):
        CostModel.from_file(bad, "x")
    with pytest.raises(ValueError, match="batch"):
        CostModel.builtin("qwen2.5-7b").decode_s(0, 100)


def test_prefill_of_many_requests_interpolates_between_measured_request_counts() -> None:
    rows = [{"shape": "s", "kind": "decode", "B": 1, "g": 0, "ctx": 32, "ms": 1.0}] + [
        {"shape": "s", "kind": "prefill", "B": b, "tokens": t, "ms": ms}
        for b, t, ms in ((1, 64, 4.0), (1, 256, 10.0), (8, 64, 12.0), (8, 256, 30.0))
    ]
    m = CostModel(rows, "s")
    assert m.prefill_s(256) == pytest.approx(10e-3) == m.prefill_s(256, 1)
    assert m.prefill_s(256, 8) == pytest.approx(30e-3)
    assert m.prefill_s(160, 8) == pytest.approx(21e-3)  # linear in tokens
    assert m.prefill_s(256, 2) == pytest.approx(10e-3 + 20e-3 / 3)  # linear in log2(requests)
    assert m.prefill_s(256, 64) == pytest.approx(30e-3)  # clamped to the measured counts
    with pytest.raises(CostModelError, match="prefill"):
        CostModel([*rows, {"shape": "s", "kind": "prefill", "B": 1, "tokens": 8, "ms": 0}], "s")


def test_a_scaled_table_prices_every_step_by_its_factor() -> None:
    m = CostModel.builtin("qwen2.5-7b")
    half = m.scaled(2.0)
    assert half.decode_s(16, 3000, 2) == pytest.approx(2 * m.decode_s(16, 3000, 2))
    assert half.prefill_s(4096) == pytest.approx(2 * m.prefill_s(4096))
    assert half.scaled(0.25).decode_s(8, 1024) == pytest.approx(0.5 * m.decode_s(8, 1024))
    assert m.speed == 1.0  # the original is untouched
    with pytest.raises(ValueError, match="factor"):
        m.scaled(0.0)

"""`seer profile`'s per-machine cache and its interleaved passes."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path
from typing import Any

import pytest

from pipeline.rollout.live import bench_generator
from pipeline.sim import profile


def _write(path: Path, loads: list[float]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"info": {"load_average": loads}, "rows": []}))


def test_cache_key_follows_what_determines_the_table() -> None:
    gen = bench_generator(True)
    assert profile.cache_key(gen, True) == profile.cache_key(dict(gen), True)
    assert profile.cache_key(gen, True) != profile.cache_key(gen, False)  # another grid
    assert profile.cache_key(gen, True) != profile.cache_key({**gen, "max_batch": 8}, True)
    assert profile.cache_key(gen, True) != profile.cache_key(gen, True, twin=False)


def test_cached_table_is_reused_unless_measured_under_load_or_refreshed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    measured: list[str] = []

    def fake_run(
        json_path: str, quick: bool = False, gen: Any = None, twin: bool = True
    ) -> dict[str, Any]:
        measured.append(json_path)  # stands in for a 30 s measurement
        _write(Path(json_path), [0.5, 0.5])
        return {}

    monkeypatch.setattr(profile, "run", fake_run)
    gen = bench_generator(True)
    path, cached = profile.cached_table(gen, True, folder=tmp_path)
    assert not cached and measured == [str(path)] and path.parent == tmp_path / "profiles"
    assert profile.cached_table(gen, True, folder=tmp_path) == (path, True)
    assert profile.cached_table(gen, True, folder=tmp_path, refresh=True) == (path, False)
    _write(path, [0.5, 1e6])  # measured while the machine was overloaded: not trusted
    assert profile.cached_table(gen, True, folder=tmp_path) == (path, False)
    path.write_text("{not json")
    assert profile.cached_table(gen, True, folder=tmp_path) == (path, False)
    assert len(measured) == 4


@pytest.mark.timeout(120)
def test_profile_passes_take_the_median_per_point() -> None:
    gen = bench_generator(True)
    table = profile.profile_engine(
        gen, batches=(1, 4), contexts=(32,), draft_lens=(0, 2), prefills=(16,), steps=3, passes=3
    )
    decode = [r for r in table["rows"] if r["kind"] == "decode"]
    assert len(decode) == 4 and all(r["ms"] > 0 for r in decode)
    # every pass prefills afresh (format 2 resumed the first pass's parked KV: 0 ms after it)
    prefill = {(r["B"], r["tokens"]): r["ms"] for r in table["rows"] if r["kind"] == "prefill"}
    assert set(prefill) == {(1, 16), (8, 128)} and all(ms > 0 for ms in prefill.values())
    assert table["info"]["passes"] == 3 and table["info"]["decode_spread_median"] >= 0
    assert len(table["info"]["load_average"]) == 2
    with pytest.raises(ValueError, match="passes"):
        profile.profile_engine(gen, batches=(1,), contexts=(32,), passes=0)


@pytest.mark.timeout(180)
def test_profile_with_a_twin_generator_stepping_alongside() -> None:
    gen = bench_generator(True)
    table = profile.profile_engine(
        gen, batches=(1, 4), contexts=(32,), draft_lens=(0,), prefills=(16,), steps=3, twin=True
    )
    assert table["info"]["twin"] == {"batch": 2, "ctx": 32}
    assert all(r["ms"] > 0 for r in table["rows"])
    assert not multiprocessing.active_children()  # the twin is gone with the block


def test_draft_rows_are_engine_steps_verifying_drafts(monkeypatch: pytest.MonkeyPatch) -> None:
    """A g > 0 row times whole engine steps in which every decoding row verifies a chain of
    g draft tokens (format 4 scaled the g = 0 step by a bare forward, without the engine's
    verify work)."""
    engine = profile._engine(bench_generator(True))
    seen: list[tuple[int, ...]] = []  # per step: each row's draft length
    step = engine.step

    def recording(drafts: Any = None) -> Any:
        result = step(drafts)
        if result.num_decode_rows == 4 and not result.num_prefill_tokens:
            seen.append(tuple(sorted(len(d.token_ids) for d in (drafts or {}).values())))
            assert all(
                d.parents == tuple(range(-1, len(d.parents) - 1)) for d in (drafts or {}).values()
            )
        return result

    monkeypatch.setattr(engine, "step", recording)
    ms = profile._decode_ms(engine, 4, 64, 6, (0, 2, 8))
    assert set(ms) == {0, 2, 8} and all(v > 0 for v in ms.values())
    # 6 steps without drafts, then 4 (half, at least 4) with every row drafting 2, then 8
    assert seen[:6] == [()] * 6
    assert seen[6:10] == [(2,) * 4] * 4 and seen[10:14] == [(8,) * 4] * 4
    assert not engine.has_work()  # released: a later pass prefills afresh

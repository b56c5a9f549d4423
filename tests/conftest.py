from __future__ import annotations

import dataclasses
import os
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import settings

os.environ.setdefault("OMP_NUM_THREADS", "1")

# no per-example deadline: a property holds or not whatever the machine's load (Hypothesis's
# 200 ms default failed examples on a loaded 2-core machine); pytest-timeout still bounds a test
settings.register_profile("seer", deadline=None)
settings.load_profile("seer")


def assert_same(a: Any, b: Any, where: str = "msg") -> None:
    """Deep equality for messages holding tensors (bit-exact, dtype and shape included)."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), where
        assert a.dtype == b.dtype and a.shape == b.shape, where
        if a.numel():
            flat_a = a.contiguous().reshape(-1).view(torch.uint8)
            assert torch.equal(flat_a, b.contiguous().reshape(-1).view(torch.uint8)), where
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray), where
        assert a.dtype == b.dtype and a.shape == b.shape, where
        assert a.tobytes() == b.tobytes(), where
    elif dataclasses.is_dataclass(a):
        assert type(a) is type(b), where
        for f in dataclasses.fields(a):
            assert_same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, tuple | list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    else:
        assert a == b and type(a) is type(b), f"{where}: {a!r} != {b!r}"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


#: the modules that take longest (worker seconds, from `make test`'s durations), run first so
#: that both workers finish together rather than one waiting on a long module picked up last
SLOWEST_FIRST = (
    "test_launchers.py",
    "test_netns_rl.py",
    "test_netns.py",
    "test_multihost_launch.py",
    "test_drafts_integration.py",
    "test_validate.py",
    "test_rollout_integration.py",
    "test_bench_eviction.py",
    "test_bench_rollout.py",
    "test_sglang_rollout.py",
    "test_launch.py",
    "test_stream_dispatch.py",
    "test_examples.py",
    "test_wheel.py",
    "test_rl_loop.py",
    "test_engine_sampling.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The slowest modules first. `make test` runs two pytest-xdist workers with `--dist
    loadfile` (each module on one worker, so a module-scoped fixture, such as a cluster its
    tests share, is built once), and xdist hands modules out in this order."""
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: files stay whole


@pytest.fixture(autouse=True)
def _keep_structlog_config() -> Any:
    """Undo a test's in-process logging set-up (`seer` commands run through `main(...)`
    call `configure_logging`, e.g. at level "error"): the next test's `capture_logs` would
    see nothing through the filtering logger it left behind."""
    import structlog

    from pipeline import logs

    saved, configured = structlog.get_config(), logs._configured
    yield
    structlog.configure(**saved)
    logs._configured = configured

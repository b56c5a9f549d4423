"""Torch is imported only by the processes that use it: the transport never imports it at
module level, so the splitter, estimator, scheduler and draft-tree store actors start without
it (seconds of CPU per process); tensors still travel as before once torch is imported."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
from pathlib import Path

import msgpack
import numpy as np
import pytest
import torch

from tests.conftest import assert_same
from transport.codec import decode, encode
from transport.errors import ProtocolError
from transport.messages import (
    PROTOCOL_VERSION,
    Array,
    Message,
    TensorBlob,
    TorchTensor,
    register_extension,
)
from transport.schema import compile_type

ROOT = Path(__file__).parents[2]


def _run(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_actors_without_tensors_start_without_torch() -> None:
    """What `python -m pipeline.cli actor --role R` imports for the actors that need no
    torch, and their messages encoded and decoded: torch stays out of `sys.modules`."""
    out = _run(
        """
        import sys
        import numpy as np
        import pipeline.cli.main, pipeline.config, pipeline.logs, pipeline.launch
        from pipeline.launch.registry import resolve_kind
        for kind in ("splitter", "estimator", "scheduler", "drafts"):
            resolve_kind(kind)
        import actors.splitter, actors.estimator, actors.scheduler, actors.drafts
        from transport.codec import decode, encode
        from transport.messages import Ping, TensorBlob
        assert decode(encode(Ping(seq=3))) == Ping(seq=3)
        out = decode(encode(TensorBlob(name="a", tensor=np.arange(4))))
        assert out.tensor.tolist() == [0, 1, 2, 3]
        print("torch imported:", "torch" in sys.modules)
        """
    )
    assert out.strip() == "torch imported: False"


def test_decoding_a_torch_tensor_imports_torch_when_needed() -> None:
    frames = encode(TensorBlob(name="t", tensor=torch.arange(6, dtype=torch.bfloat16)))
    raw = [bytes(f) for f in frames]
    out = _run(
        f"""
        import sys
        from transport.codec import decode
        assert "torch" not in sys.modules
        msg = decode({raw!r})
        import torch
        assert isinstance(msg.tensor, torch.Tensor) and msg.tensor.dtype == torch.bfloat16
        print(msg.tensor.float().tolist())
        """
    )
    assert out.strip() == "[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]"


@register_extension(2101)
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TorchAnnotated(Message):
    """A user's message that names `torch.Tensor` itself rather than `Array`."""

    plain: torch.Tensor
    either: np.ndarray | torch.Tensor
    maybe: torch.Tensor | None = None


def test_messages_annotated_with_torch_tensor_still_check_and_round_trip() -> None:
    msg = TorchAnnotated(plain=torch.ones(2), either=np.zeros(3), maybe=torch.eye(2))
    assert_same(decode(encode(msg)), msg)
    other = TorchAnnotated(plain=torch.ones(1, dtype=torch.int64), either=torch.ones(1))
    assert_same(decode(encode(other)), other)
    header = msgpack.packb([PROTOCOL_VERSION, TorchAnnotated.TAG, {"plain": 3, "either": 4}])
    with pytest.raises(ProtocolError, match=r"TorchAnnotated\.plain: expected tensor, got int"):
        decode([header])


def test_array_fields_accept_tensors_and_arrays_and_nothing_else() -> None:
    for tp in (Array, torch.Tensor, TorchTensor, np.ndarray | torch.Tensor, Array | None):
        check = compile_type(tp, "T")
        t, a = torch.ones(2), np.ones(2)
        assert check(t, "f") is t and check(a, "f") is a
        with pytest.raises(ProtocolError, match="f: expected"):
            check([1.0, 2.0], "f")
    assert isinstance(torch.nn.Parameter(torch.ones(1)), TorchTensor)
    assert not isinstance(np.ones(1), TorchTensor)

"""WeightGroup: one rank of SGLang's weight-update process group, and what travels in it.

SGLang's distributed weight update (`/init_weights_update_group`, then
`/update_weights_from_distributed` per version) has the weights' holder join a
torch.distributed group as rank 0 and broadcast each tensor; the server's ranks
(`rank_offset + tp_rank`) receive them in the order the request names them.

SGLang joins with `init_custom_process_group`: a `tcp://` rendezvous (rank 0 hosts the
store), a `PrefixStore(group_name)`, then torch's `_new_process_group_helper`, which adds
`"<group_name>/"` and `"<device>/"` prefixes. `WeightGroup.open` builds the same store
layers and the backend's process group directly (gloo on CPU, NCCL on GPUs), so it
rendezvouses with a real SGLang server without registering a group in torch's default
world: no default process group is needed, and two ranks may live in one process (the
tests run `seer serve` and the backend side by side).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import PrefixStore
from torch.distributed.rendezvous import rendezvous

BACKENDS = ("gloo", "nccl")


class WeightGroupError(RuntimeError):
    """The group could not be formed, or a broadcast failed."""


class WeightGroup:
    """One rank of a weight-update group (`open` blocks until every rank has joined)."""

    def __init__(self, pg: Any, rank: int, world_size: int, device: str) -> None:
        self.pg = pg
        self.rank = rank
        self.world_size = world_size
        self.device = device

    @classmethod
    def open(
        cls,
        *,
        master_address: str,
        master_port: int,
        rank: int,
        world_size: int,
        group_name: str,
        backend: str = "gloo",
        timeout_s: float = 300.0,
    ) -> WeightGroup:
        """Join as `rank` of `world_size` (rank 0 hosts the rendezvous store). Blocking."""
        if backend not in BACKENDS:
            raise WeightGroupError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if not group_name:
            raise WeightGroupError("group_name must not be empty")
        if not 0 <= rank < world_size:
            raise WeightGroupError(f"rank {rank} is outside a world of {world_size}")
        timeout = timedelta(seconds=timeout_s)
        host = f"[{master_address}]" if ":" in master_address else master_address
        try:
            store, _, _ = next(
                rendezvous(f"tcp://{host}:{master_port}", rank, world_size, timeout=timeout)
            )
            store.set_timeout(timeout)
            device = "cpu" if backend == "gloo" else "cuda"
            named = PrefixStore(f"{group_name}/", PrefixStore(group_name, store))
            layered = PrefixStore(f"{device}/", named)
            if backend == "gloo":
                pg = dist.ProcessGroupGloo(layered, rank, world_size, timeout)
            else:
                nccl = getattr(dist, "ProcessGroupNCCL", None)
                if nccl is None:
                    raise WeightGroupError("the nccl backend needs a CUDA build of torch")
                options = nccl.Options()
                options._timeout = timeout
                pg = nccl(layered, rank, world_size, options)
        except (RuntimeError, ValueError, OSError) as exc:
            raise WeightGroupError(
                f"could not join weight-update group {group_name!r} at "
                f"{master_address}:{master_port} as rank {rank}/{world_size}: {exc}"
            ) from exc
        return cls(pg, rank, world_size, device)

    def broadcast(self, tensor: torch.Tensor) -> torch.Tensor:
        """Rank 0 sends `tensor`; every other rank receives into it. Blocking."""
        opts = dist.BroadcastOptions()
        opts.rootRank = 0
        try:
            self.pg.broadcast([tensor], opts).wait()
        except RuntimeError as exc:
            raise WeightGroupError(f"broadcast failed: {exc}") from exc
        return tensor

    def send(self, tensors: Mapping[str, torch.Tensor]) -> None:
        """Rank 0: every tensor, in order (contiguous, on this group's device)."""
        for tensor in tensors.values():
            self.broadcast(tensor.detach().to(self.device).contiguous())

    def receive(
        self, names: list[str], dtypes: list[str], shapes: list[list[int]]
    ) -> dict[str, torch.Tensor]:
        """A receiving rank: the tensors a `/update_weights_from_distributed` names."""
        if not len(names) == len(dtypes) == len(shapes):
            raise WeightGroupError(
                f"names, dtypes and shapes differ in length: {len(names)}, {len(dtypes)}, "
                f"{len(shapes)}"
            )
        out: dict[str, torch.Tensor] = {}
        for name, dtype, shape in zip(names, dtypes, shapes, strict=True):
            tensor = torch.empty(shape, dtype=torch_dtype(dtype), device=self.device)
            out[name] = self.broadcast(tensor)
        return out

    def close(self) -> None:
        abort = getattr(self.pg, "abort", None)  # NCCL; gloo closes with its last reference
        if callable(abort):
            abort()
        self.pg = None


def torch_dtype(name: str) -> torch.dtype:
    """`"bfloat16"` (or `"torch.bfloat16"`) as a dtype, as SGLang reads it."""
    dtype = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise WeightGroupError(f"unknown dtype {name!r}")
    return dtype


def tensor_meta(tensors: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    """The `names`, `dtypes`, `shapes` of a `/update_weights_from_distributed` body."""
    return {
        "names": list(tensors),
        "dtypes": [str(t.dtype).removeprefix("torch.") for t in tensors.values()],
        "shapes": [list(t.shape) for t in tensors.values()],
    }

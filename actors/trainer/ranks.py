"""Trainer ranks on torch.distributed: the torchrun environment and the process group.

A trainer of R ranks is R processes, one rank each. Each reads the usual environment
(``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``), so the same
code runs under ``torchrun`` or under our launcher (which sets the same variables from the
topology: rank = the actor's index, world size = the count of trainer actors). The backend
is gloo on CPU and NCCL for CUDA tensors when CUDA is available. One rank (``WORLD_SIZE`` 1
or unset) needs no process group at all: every collective below is then the identity.

Two timeouts: joining (`init_ranks`' `timeout_s`: ranks may start far apart on a loaded
host) and each collective (`collective_timeout_s`, shorter): the collectives run on a group
of their own made with it, so a rank whose peer hangs (frozen, or on a host that vanished
without closing its sockets) fails its step with `RankError` instead of waiting out the
join timeout. A peer that dies on the same host is noticed at once (gloo's connection
closes); the driver also watches the ranks (`pipeline.rl.ranks`).
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.distributed as dist


class RankError(RuntimeError):
    """The rank environment is malformed, or the process group could not form."""


@dataclass(frozen=True, slots=True)
class RankEnv:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = 29500

    def __post_init__(self) -> None:
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise RankError(f"rank {self.rank} outside world size {self.world_size}")
        if not 0 < self.master_port < 65536:
            raise RankError(f"MASTER_PORT {self.master_port} out of range")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RankEnv:
        """The torchrun variables (absent: one rank)."""
        e = os.environ if env is None else env
        try:
            return cls(
                rank=int(e.get("RANK", "0")),
                world_size=int(e.get("WORLD_SIZE", "1")),
                local_rank=int(e.get("LOCAL_RANK", e.get("RANK", "0"))),
                master_addr=e.get("MASTER_ADDR", "127.0.0.1"),
                master_port=int(e.get("MASTER_PORT", "29500")),
            )
        except ValueError as exc:
            raise RankError(f"malformed torchrun environment: {exc}") from exc

    def to_env(self) -> dict[str, str]:
        return {
            "RANK": str(self.rank),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_RANK": str(self.local_rank),
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(self.master_port),
        }


def default_backend() -> str:
    """gloo on CPU; with CUDA, NCCL for CUDA tensors and gloo for CPU ones (the trainer's
    tensors live where its model does)."""
    return "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"


_collectives: dist.ProcessGroup | None = None  # every rank, with the collective timeout


def init_ranks(
    env: RankEnv,
    *,
    backend: str | None = None,
    timeout_s: float = 120.0,
    collective_timeout_s: float | None = None,
) -> None:
    """Join the process group of ``env`` (blocks until every rank has joined, at most
    ``timeout_s``); collectives then time out after ``collective_timeout_s`` (None: the
    join timeout)."""
    global _collectives
    if env.world_size == 1 or dist.is_initialized():
        return
    if "GLOO_SOCKET_IFNAME" not in os.environ:  # ranks on several hosts: gloo's own pick
        name = interface_towards(env.master_addr)  # (the hostname's) may be loopback
        if name is not None:
            os.environ["GLOO_SOCKET_IFNAME"] = name
    try:
        dist.init_process_group(
            backend or default_backend(),
            init_method=f"tcp://{env.master_addr}:{env.master_port}",
            rank=env.rank,
            world_size=env.world_size,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
        if collective_timeout_s is not None:
            timeout = datetime.timedelta(seconds=collective_timeout_s)
            _collectives = dist.new_group(timeout=timeout)
    except Exception as exc:  # torch raises several unrelated types here
        raise RankError(f"rank {env.rank}/{env.world_size} could not join: {exc}") from exc


def interface_towards(addr: str) -> str | None:
    """The name of this host's network interface that routes to `addr` (gloo then connects
    the ranks over it, not over whatever the hostname resolves to), or None: `addr` is
    loopback, unroutable, or the interfaces cannot be read (not Linux)."""
    import fcntl
    import ipaddress
    import socket
    import struct

    try:
        if ipaddress.ip_address(socket.gethostbyname(addr)).is_loopback:
            return None
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((addr, 9))  # no packet is sent: a UDP connect only picks the route
            local = s.getsockname()[0]
            for _, name in socket.if_nameindex():
                request = struct.pack("256s", name[:15].encode())
                try:
                    got = fcntl.ioctl(s.fileno(), 0x8915, request)  # SIOCGIFADDR
                except OSError:  # no IPv4 address on it
                    continue
                if socket.inet_ntoa(got[20:24]) == local:
                    return name
    except (OSError, ValueError):
        return None
    return None


def close_ranks() -> None:
    global _collectives
    _collectives = None
    if dist.is_initialized():
        dist.destroy_process_group()


def is_distributed() -> bool:
    return dist.is_initialized() and dist.get_world_size() > 1


def all_reduce_sum(values: torch.Tensor) -> torch.Tensor:
    """Sum of ``values`` over every rank (in place, also returned)."""
    if is_distributed():
        _all_reduce(values, dist.ReduceOp.SUM)
    return values


def all_reduce_min(values: torch.Tensor) -> torch.Tensor:
    if is_distributed():
        _all_reduce(values, dist.ReduceOp.MIN)
    return values


def _all_reduce(values: torch.Tensor, op: dist.ReduceOp.RedOpType) -> None:
    """One all-reduce; a peer that is gone or hangs past the timeout raises `RankError`."""
    try:
        dist.all_reduce(values, op=op, group=_collectives)
    except RuntimeError as exc:  # gloo: "Connection closed by peer", "Timed out ..."
        rank = dist.get_rank()
        raise RankError(f"rank {rank}: a collective failed (a peer is gone?): {exc}") from exc

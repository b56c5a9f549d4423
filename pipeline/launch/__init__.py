"""Launchers that run the same actor code: `launch(config, launcher=...)` picks one.

- `local` (local.py): one OS process per actor (`seer actor ...`), sockets over ipc or tcp.
- `inprocess` (local.py): every actor a task of the caller's event loop, for embedding and
  tests.
- `ray` (ray.py): every actor a Ray actor, placed by Ray, talking over tcp + CURVE.
- `static` (static.py): attach to actors started by hand or by Slurm/Kubernetes
  (`seer actor`), at fixed addresses or through a registry.

All yield a `Cluster` (cluster.py): the driver's handle to send to, call and receive from
actors. registry.py builds an actor from the topology, endpoints.py derives addresses and
keys, backend.py starts the engine servers that a generator drives.
"""

from __future__ import annotations

import contextlib
from typing import Any

from pipeline.config import PipelineConfig
from pipeline.launch.cluster import ActorStatus, Cluster, LaunchError, await_ready
from pipeline.launch.local import launch_inprocess, launch_local

__all__ = [
    "LAUNCHERS",
    "ActorStatus",
    "Cluster",
    "LaunchError",
    "await_ready",
    "launch",
    "launch_inprocess",
    "launch_local",
]

LAUNCHERS = ("local", "inprocess", "ray", "static")


def launch(
    config: PipelineConfig, launcher: str = "local", **kwargs: Any
) -> contextlib.AbstractAsyncContextManager[Cluster]:
    """`async with launch(config, "ray") as cluster:` one entry to every launcher; keyword
    arguments go to the launcher (e.g. `registry=` for static)."""
    if launcher == "local":
        return launch_local(config, **kwargs)
    if launcher == "inprocess":
        return launch_inprocess(config, **kwargs)
    if launcher == "ray":
        from pipeline.launch.ray import launch_ray

        return launch_ray(config, **kwargs)
    if launcher == "static":
        from pipeline.launch.static import launch_static

        return launch_static(config, **kwargs)
    raise ValueError(f"unknown launcher {launcher!r}; use one of {list(LAUNCHERS)}")

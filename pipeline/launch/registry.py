"""Actor kinds by name, and building an actor from a `PipelineConfig`.

A topology names an actor kind either by a short name registered here or by an import
path `package.module:Class` (a user's own actor). Config files are trusted local input;
nothing received over the wire ever names a class.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from actors.base import Actor, ActorContext, AddressBook
from pipeline.config import CONTROL, ConfigError, PipelineConfig, build_options
from pipeline.launch.child import allow_working_dir_imports
from transport.channels import Transport
from transport.codec import CodecLimits
from transport.security import CurveKeys
from transport.sockets import SocketOptions, ZmqTransport

ACTOR_KINDS: dict[str, str] = {
    "splitter": "actors.splitter.actor:RequestSplitter",
    "estimator": "actors.estimator.actor:LengthEstimatorActor",
    "scheduler": "actors.scheduler.actor:SchedulerActor",
    "generator": "actors.generator.actor:GeneratorActor",
    "trainer": "actors.trainer.actor:TrainerActor",
    "drafts": "actors.drafts.actor:DraftTreeStoreActor",
    "environment": "actors.environment.actor:EnvironmentActor",
}


def resolve_kind(kind: str) -> type[Actor]:
    path = ACTOR_KINDS.get(kind, kind)
    module_name, _, class_name = path.partition(":")
    if not class_name:
        raise ConfigError(
            f"unknown actor kind {kind!r}; use one of {sorted(ACTOR_KINDS)} "
            "or 'package.module:Class'"
        )
    allow_working_dir_imports()  # a user's actor module, behind the installed packages
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"actor kind {kind!r}: cannot import {path}: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, Actor)):
        raise ConfigError(f"actor kind {kind!r}: {path} is not an Actor subclass")
    return cls


def validate_topology(config: PipelineConfig) -> None:
    """Resolve every actor kind and build its options, so mistakes show before launch."""
    for group in config.topology.actors:
        cls = resolve_kind(group.kind)
        build_options(cls.Options, group.options, f"topology.actors.{group.role}.options")


def socket_options(config: PipelineConfig) -> SocketOptions:
    t = config.transport
    limits = CodecLimits(
        max_header_bytes=t.max_header_mib << 20, max_frame_bytes=t.max_frame_mib << 20
    )
    curve = CurveKeys.load(t.curve_keys) if t.scheme == "tcp" and t.curve_keys else None
    return SocketOptions(hwm=t.hwm, limits=limits, heartbeat_s=config.heartbeat_s, curve=curve)


def zmq_transport(config: PipelineConfig) -> ZmqTransport:
    return ZmqTransport(socket_options(config))


def build_actor(
    config: PipelineConfig,
    role: str,
    index: int,
    transport: Transport,
    *,
    in_process: bool,
    address_of: AddressBook | None = None,
    **extra: Any,
) -> Actor:
    """Actor `role`/`index` of `config`. `address_of`: where every actor listens, when a
    launcher learnt it at run time (Ray, a registry) instead of deriving it from `config`;
    then the actor's own inbox is `address_of(role, index)`, already bound by the launcher."""
    group = config.topology.group(role)
    if not 0 <= index < group.count:
        raise ConfigError(f"actor {role} has indices 0..{group.count - 1}, got {index}")
    cls = resolve_kind(group.kind)
    options = build_options(cls.Options, group.options, f"topology.actors.{role}.options")
    book = address_of or config.address
    ctx = ActorContext(
        role=role,
        index=index,
        address=book(role, index),
        address_of=book,
        transport=transport,
        options=options,
        control_address=book(CONTROL, 0),
        heartbeat_s=config.heartbeat_s,
        stop_timeout_s=config.stop_timeout_s,
        handle_signals=not in_process,
        parent_pid=None if in_process else _parent_pid(),
        extra=extra,
        peers={g.role: g.count for g in config.topology.actors},
    )
    return cls(ctx)


def _parent_pid() -> int | None:
    value = os.environ.get("SEER_PARENT_PID")
    return int(value) if value else None

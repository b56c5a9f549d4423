"""Addresses learnt at run time: the address book of launchers that bind free ports.

`launch_local` derives every address from the config (`PipelineConfig.address`). The Ray
and static launchers cannot: an actor binds `tcp://<its node's ip>:*` (a free port on
whatever node it landed on) and reports what it got. `AddressBook` collects those reports
(and the driver's) into the same `(role, index) -> address` callable the actors already
take; `PreboundTransport` hands an actor the inbox its host bound before the book existed.
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Mapping

from pipeline.config import CONTROL, DRIVER, PipelineConfig
from transport.channels import (
    PublishChannel,
    RecvChannel,
    ReplyChannel,
    RequestChannel,
    SendChannel,
)
from transport.sockets import ReplySocket, SubSocket, ZmqTransport


class AddressBookError(LookupError):
    """The book has no address for an actor, or the reports do not fit the topology."""


class AddressBook:
    """`(role, index) -> address` for every actor of a topology, the driver and control."""

    def __init__(self, entries: Mapping[str, str]) -> None:
        self.entries = dict(entries)  # "role-index" -> "tcp://host:port"

    @classmethod
    def complete(cls, config: PipelineConfig, entries: Mapping[str, str]) -> AddressBook:
        """A book that must hold every actor of `config`, the driver and control."""
        book = cls(entries)
        wanted = [key(r, i) for r, i in config.topology.instances()]
        missing = [k for k in (*wanted, key(DRIVER, 0), key(CONTROL, 0)) if k not in entries]
        if missing:
            raise AddressBookError(f"address book lacks {missing}")
        return book

    def __call__(self, role: str, index: int = 0) -> str:
        try:
            return self.entries[key(role, index)]
        except KeyError:
            raise AddressBookError(f"no address for {key(role, index)}") from None


def key(role: str, index: int) -> str:
    return f"{role}-{index}"


def over_tcp(config: PipelineConfig) -> PipelineConfig:
    """The config with tcp transport: actors on other hosts. CURVE keys stay required
    (`ConfigError` without `transport.curve_keys`, unless `allow_insecure_tcp`)."""
    if config.transport.scheme == "tcp":
        return config
    transport = dataclasses.replace(config.transport, scheme="tcp")
    return dataclasses.replace(config, transport=transport)


def node_ip(towards: str = "10.255.255.255") -> str:
    """This host's address on the interface that routes `towards` (no packet is sent: a
    UDP connect only picks the route); 127.0.0.1 when there is no route at all."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect((towards, 9))
            return str(s.getsockname()[0])
        except OSError:
            return "127.0.0.1"


class PreboundTransport:
    """A `ZmqTransport` whose `reply(address, bind=True)` for the actor's own inbox returns
    the socket bound earlier (before the address book existed); everything else is new."""

    def __init__(self, inner: ZmqTransport, inbox: ReplySocket) -> None:
        self.inner = inner
        self.inbox = inbox

    def push(self, address: str, *, bind: bool = False) -> SendChannel:
        return self.inner.push(address, bind=bind)

    def pull(self, address: str, *, bind: bool = True) -> RecvChannel:
        return self.inner.pull(address, bind=bind)

    def pub(self, address: str, *, bind: bool = True) -> PublishChannel:
        return self.inner.pub(address, bind=bind)

    def sub(
        self, address: str, *, topics: tuple[bytes, ...] = (b"",), bind: bool = False
    ) -> SubSocket:
        return self.inner.sub(address, topics=topics, bind=bind)

    def reply(self, address: str, *, bind: bool = True) -> ReplyChannel:
        if bind and address == self.inbox.endpoint:
            return self.inbox
        return self.inner.reply(address, bind=bind)

    def request(self, address: str, *, bind: bool = False) -> RequestChannel:
        return self.inner.request(address, bind=bind)

    def close(self) -> None:
        self.inner.close()

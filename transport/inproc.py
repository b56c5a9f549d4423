"""In-process channels with the interface of `transport.sockets`, for the embedded mode.

`InprocTransport` makes push/pull, pub/sub and request/reply endpoints over anyio memory
streams, all in one event loop. Messages still go through the codec (encode, own the
bytes, decode), so the embedded mode checks and copies exactly what the wire would;
only the socket is different. Bounded buffers (`SocketOptions.hwm`) give the same
backpressure; a publisher drops messages for a full subscriber, as zmq's PUB does.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from transport.codec import decode, encode
from transport.errors import ChannelClosed, PeerGone, RemoteError, RequestTimeout
from transport.messages import ErrorReply, Message
from transport.sockets import Incoming, SocketOptions

Frames = list[bytes | bytearray]
C = TypeVar("C", bound="_Channel")


def _own(msg: Message) -> Frames:
    """Encoded frames that no longer alias the sender's tensors."""
    frames = encode(msg)
    return [bytes(frames[0]), *(bytearray(memoryview(f).cast("B")) for f in frames[1:])]


@dataclass
class _Endpoint:
    send: MemoryObjectSendStream[Any]
    receive: MemoryObjectReceiveStream[Any]
    subscribers: list[tuple[tuple[bytes, ...], MemoryObjectSendStream[Any]]] = field(
        default_factory=list
    )
    is_bound: bool = False


class InprocHub:
    """The address book of one embedded pipeline: address -> endpoint."""

    def __init__(self) -> None:
        self.endpoints: dict[str, _Endpoint] = {}

    def endpoint(self, address: str, hwm: int) -> _Endpoint:
        ep = self.endpoints.get(address)
        if ep is None:
            send, receive = anyio.create_memory_object_stream[Any](hwm)
            ep = self.endpoints[address] = _Endpoint(send, receive)
        return ep

    def bind(self, address: str, hwm: int) -> _Endpoint:
        ep = self.endpoint(address, hwm)
        if ep.is_bound:
            raise OSError(f"address already in use: {address}")
        ep.is_bound = True
        return ep


class _Channel:
    def __init__(self, ep: _Endpoint, options: SocketOptions, address: str) -> None:
        self.ep = ep
        self.options = options
        self.address = address
        self.closed = False

    async def _put(self, item: Any) -> None:
        if self.closed:
            raise ChannelClosed(f"channel for {self.address} is closed")
        try:
            await self.ep.send.send(item)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            raise PeerGone(f"receiver at {self.address} is gone") from None

    async def _get(self) -> Any:
        if self.closed:
            raise ChannelClosed(f"channel for {self.address} is closed")
        try:
            return await self.ep.receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise ChannelClosed(f"channel for {self.address} is closed") from None

    def close(self) -> None:
        self.closed = True


class InprocPush(_Channel):
    async def send(self, msg: Message) -> None:
        await self._put(_own(msg))


class InprocPull(_Channel):
    async def recv(self) -> Message:
        return decode(await self._get(), self.options.limits)

    def close(self) -> None:
        super().close()
        self.ep.receive.close()


class InprocPub(_Channel):
    async def send(self, msg: Message, topic: bytes = b"") -> None:
        frames = _own(msg)
        for topics, stream in list(self.ep.subscribers):
            if any(topic.startswith(t) for t in topics):
                try:
                    stream.send_nowait(frames)
                except anyio.WouldBlock:
                    pass  # a slow subscriber loses messages, as with zmq PUB at its HWM
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    self.ep.subscribers.remove((topics, stream))


class InprocSub(_Channel):
    def __init__(
        self, ep: _Endpoint, options: SocketOptions, address: str, topics: tuple[bytes, ...]
    ) -> None:
        super().__init__(ep, options, address)
        self._send, self._receive = anyio.create_memory_object_stream[Any](options.hwm)
        ep.subscribers.append((topics, self._send))

    async def recv(self) -> Message:
        try:
            frames = await self._receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise ChannelClosed(f"subscription to {self.address} is closed") from None
        return decode(frames, self.options.limits)

    def close(self) -> None:
        super().close()
        self._receive.close()


class InprocReply(_Channel):
    """Receives (corr, frames, reply stream); `reply` answers through that stream."""

    def __init__(self, ep: _Endpoint, options: SocketOptions, address: str) -> None:
        super().__init__(ep, options, address)
        self._waiting: dict[bytes, MemoryObjectSendStream[Any]] = {}

    async def recv(self) -> Incoming:
        corr, frames, back = await self._get()
        if back is not None:
            self._waiting[corr] = back
        try:
            msg = decode(frames, self.options.limits)
        except Exception as exc:
            if back is not None:
                reply = ErrorReply(kind="ProtocolError", detail=str(exc))
                await self.reply(Incoming(reply, b"", corr), reply)
            raise
        return Incoming(msg, b"", corr if back is not None else b"")

    async def reply(self, incoming: Incoming, msg: Message) -> None:
        back = self._waiting.pop(incoming.corr, None)
        if back is None:
            raise ValueError("cannot reply to a one-way message or twice to one call")
        try:
            back.send_nowait(_own(msg))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            raise PeerGone(f"caller of {self.address} is gone; reply dropped") from None
        finally:
            back.close()

    def close(self) -> None:
        super().close()
        self.ep.receive.close()
        for back in self._waiting.values():
            back.close()
        self._waiting.clear()


class InprocRequest(_Channel):
    _ids = itertools.count(1)

    async def send(self, msg: Message) -> None:
        await self._put((b"", _own(msg), None))

    def offer(self, msg: Message) -> bool:
        """Best effort: queue `msg` if the receiver has room, else drop it (never waits)."""
        if self.closed:
            raise ChannelClosed(f"channel for {self.address} is closed")
        try:
            self.ep.send.send_nowait((b"", _own(msg), None))
        except anyio.WouldBlock:
            return False
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            return False
        return True

    async def call(self, msg: Message, timeout: float = 10.0) -> Message:
        corr = next(self._ids).to_bytes(8, "little")
        back, replies = anyio.create_memory_object_stream[Any](1)
        with replies:
            try:
                with anyio.fail_after(timeout):
                    await self._put((corr, _own(msg), back))
                    frames = await replies.receive()
            except TimeoutError:
                raise RequestTimeout(
                    f"no reply to {type(msg).__name__} from {self.address} within {timeout:g} s"
                ) from None
            except anyio.EndOfStream:
                raise PeerGone(f"peer at {self.address} closed during the call") from None
        reply = decode(frames, self.options.limits)
        if isinstance(reply, ErrorReply):
            raise RemoteError(reply.kind, reply.detail)
        return reply


class InprocTransport:
    """The in-process twin of `ZmqTransport`, over one `InprocHub`."""

    def __init__(self, hub: InprocHub, options: SocketOptions | None = None) -> None:
        self.hub = hub
        self.options = options or SocketOptions()
        self._channels: list[_Channel] = []

    def _ep(self, address: str, bind: bool) -> _Endpoint:
        hwm = self.options.hwm
        return self.hub.bind(address, hwm) if bind else self.hub.endpoint(address, hwm)

    def _keep(self, channel: C) -> C:
        self._channels.append(channel)
        return channel

    def push(self, address: str, *, bind: bool = False) -> InprocPush:
        return self._keep(InprocPush(self._ep(address, bind), self.options, address))

    def pull(self, address: str, *, bind: bool = True) -> InprocPull:
        return self._keep(InprocPull(self._ep(address, bind), self.options, address))

    def pub(self, address: str, *, bind: bool = True) -> InprocPub:
        return self._keep(InprocPub(self._ep(address, bind), self.options, address))

    def sub(
        self, address: str, *, topics: tuple[bytes, ...] = (b"",), bind: bool = False
    ) -> InprocSub:
        ep = self._ep(address, bind)
        return self._keep(InprocSub(ep, self.options, address, topics))

    def reply(self, address: str, *, bind: bool = True) -> InprocReply:
        return self._keep(InprocReply(self._ep(address, bind), self.options, address))

    def request(self, address: str, *, bind: bool = False) -> InprocRequest:
        return self._keep(InprocRequest(self._ep(address, bind), self.options, address))

    def close(self) -> None:
        for channel in self._channels:
            channel.close()
        self._channels.clear()

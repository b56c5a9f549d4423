"""Typed errors of the transport layer.

Every failure that crosses a process boundary has a name here, so callers can tell a
malformed message (`ProtocolError`) from a peer that went away (`PeerGone`) or one that
did not answer in time (`RequestTimeout`).
"""

from __future__ import annotations


class TransportError(Exception):
    """Base class of every transport failure."""


class ProtocolError(TransportError):
    """A message could not be decoded: bad framing, unknown tag, wrong version or field type,
    or a frame over the configured limit. The message is dropped; the receiver keeps serving."""


class MessageTooLarge(TransportError, ValueError):
    """A message is over the `CodecLimits` its receivers enforce: refused where it is built
    (encoded), before it is sent; the error names the message and the limit."""


class PeerGone(TransportError):
    """The peer of a request/reply socket disconnected while calls were in flight."""


class RequestTimeout(TransportError):
    """A call got no reply within its timeout."""


class RemoteError(TransportError):
    """The peer received the call but its handler failed; `kind` is the remote exception type."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


class ChannelClosed(TransportError):
    """The socket or channel was closed locally."""

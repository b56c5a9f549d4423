"""Typed input errors of the generation engines.

Every one is a ``ValueError`` (via ``EngineError``) raised before any engine state changes,
so the caller can report it and the engine keeps serving.
"""

from __future__ import annotations


class EngineError(ValueError):
    """Base of every input error an engine reports; the engine keeps serving after it."""


class InvalidRequestError(EngineError):
    """Malformed request: empty prompt, non-positive max tokens, bad sampling params."""


class ContextOverflowError(EngineError):
    """Prompt plus generated tokens do not fit the context or the KV budget."""


class TokenOutOfVocabError(EngineError):
    """A token id outside ``[0, vocab_size)``."""


class RequestNotInEngineError(EngineError, KeyError):
    """No request with this id is running, waiting or parked."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class DuplicateRequestError(EngineError):
    """A request with this id is already running or waiting."""


class WeightVersionError(EngineError):
    """The request expects another weight version than the engine holds."""


class DraftError(EngineError):
    """Malformed draft: bad parents, duplicate sibling tokens, too many tokens."""


class EngineBusyError(EngineError):
    """The operation needs an idle engine (no running or waiting requests)."""


class WeightLoadError(EngineError):
    """A weight publication the engine cannot load (missing or unexpected names, wrong
    shapes); the engine keeps its weights and version and keeps serving."""


class ServerError(EngineError):
    """A generation server refused a request (HTTP 400) or answered something that is not
    its protocol (garbage JSON, a missing field); the message is the server's or says
    what was wrong. The chunk fails with it; nothing is retried."""


class ServerLostError(RuntimeError):
    """A generation server stopped serving (503, connection refused or reset, timeout).
    Not an input error: the chunk is not reported, the generator counts as lost and the
    scheduler re-queues its chunks from their committed progress."""

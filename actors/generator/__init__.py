"""The generator: an actor that drives one engine (``backend`` option), the engine protocol
with its plain data, and the speculation it does around each step. The built-in engine is
``actors.generator.builtin``."""

from actors.generator.engine import (
    ChunkRequest,
    ChunkResult,
    Draft,
    Engine,
    EngineCounters,
    EngineLoad,
    FinishReason,
    RemoteEngine,
    SamplingParams,
    SpeculativeEngine,
    StepDelta,
    StepResult,
    error_result,
)
from actors.generator.errors import (
    ContextOverflowError,
    DraftError,
    DuplicateRequestError,
    EngineBusyError,
    EngineError,
    InvalidRequestError,
    RequestNotInEngineError,
    ServerError,
    ServerLostError,
    TokenOutOfVocabError,
    WeightVersionError,
)
from actors.generator.options import BACKENDS, GeneratorOptions, build_engine

__all__ = [
    "BACKENDS",
    "ChunkRequest",
    "ChunkResult",
    "ContextOverflowError",
    "Draft",
    "DraftError",
    "DuplicateRequestError",
    "Engine",
    "EngineBusyError",
    "EngineCounters",
    "EngineError",
    "EngineLoad",
    "FinishReason",
    "GeneratorOptions",
    "InvalidRequestError",
    "RemoteEngine",
    "RequestNotInEngineError",
    "SamplingParams",
    "ServerError",
    "ServerLostError",
    "SpeculativeEngine",
    "StepDelta",
    "StepResult",
    "TokenOutOfVocabError",
    "WeightVersionError",
    "build_engine",
    "error_result",
]

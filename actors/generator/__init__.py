"""Generation engines: the ``Engine`` interface and the built-in ``TorchEngine``."""

from actors.generator.config import EngineConfig
from actors.generator.drafts import Draft, DraftTree, validate_draft
from actors.generator.engine import (
    ChunkRequest,
    ChunkResult,
    Engine,
    EngineCounters,
    EngineLoad,
    FinishReason,
    SamplingParams,
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
    TokenOutOfVocabError,
    UnknownRequestError,
    WeightVersionError,
)
from actors.generator.profile import StepProfile
from actors.generator.torch_engine import TorchEngine

__all__ = [
    "ChunkRequest",
    "ChunkResult",
    "ContextOverflowError",
    "Draft",
    "DraftError",
    "DraftTree",
    "DuplicateRequestError",
    "Engine",
    "EngineBusyError",
    "EngineConfig",
    "EngineCounters",
    "EngineError",
    "EngineLoad",
    "FinishReason",
    "InvalidRequestError",
    "SamplingParams",
    "StepDelta",
    "StepProfile",
    "StepResult",
    "TokenOutOfVocabError",
    "TorchEngine",
    "UnknownRequestError",
    "WeightVersionError",
    "error_result",
    "validate_draft",
]

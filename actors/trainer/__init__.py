"""The trainer: GRPO math (``grpo``), padded batches (``batch``), the synchronous update core
(``core``), resumable checkpoints (``checkpoint``) and a rank's receiving side of the
dispatcher (``shard``)."""

from actors.errors import OffPolicyError
from actors.trainer.batch import TrainBatch, TrainSample, compute_advantages, make_batch
from actors.trainer.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from actors.trainer.core import GRPOTrainer, TrainStepError
from actors.trainer.grpo import group_advantages, grpo_loss, masked_mean, token_logprobs

__all__ = [
    "CheckpointError",
    "GRPOTrainer",
    "OffPolicyError",
    "TrainBatch",
    "TrainSample",
    "TrainStepError",
    "compute_advantages",
    "group_advantages",
    "grpo_loss",
    "load_checkpoint",
    "make_batch",
    "masked_mean",
    "save_checkpoint",
    "token_logprobs",
]

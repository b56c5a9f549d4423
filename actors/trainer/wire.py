"""The trainer's wire <-> domain conversions, in one place beside its shell."""

from __future__ import annotations

from actors.trainer.batch import TrainSample
from transport.messages import TrainSampleSpec


def train_sample(spec: TrainSampleSpec, request_id: str = "") -> TrainSample:
    return TrainSample(
        prompt_ids=spec.prompt_ids,
        completion_ids=spec.completion_ids,
        old_logprobs=spec.old_logprobs,
        reward=spec.reward,
        group_id=spec.group_id,
        weight_versions=spec.weight_versions,
        error_index=spec.error_index,
        loss_mask=spec.loss_mask,
        request_id=request_id,
    )

"""The generator's wire <-> engine conversions, in one place beside its shell."""

from __future__ import annotations

from actors.generator.engine import (
    ChunkRequest,
    ChunkResult,
    EngineCounters,
    EngineLoad,
    SamplingParams,
)
from transport.messages import ChunkAssigned, ChunkFinished, LoadInfo, SpecStats


def chunk_request(msg: ChunkAssigned) -> ChunkRequest:
    s = msg.sampling
    params = SamplingParams(
        temperature=s.temperature,
        top_k=s.top_k,
        top_p=s.top_p,
        seed=s.seed,
        ignore_eos=s.ignore_eos,
        stop_token_ids=s.stop_token_ids,
    )
    return ChunkRequest(
        request_id=msg.request_id,
        prompt_ids=msg.prompt_ids,
        max_chunk_tokens=msg.max_chunk_tokens,
        generated_ids=msg.generated_ids,
        params=params,
        weight_version=msg.weight_version,
        max_new_tokens=msg.max_new_tokens,
    )


def load_info(
    instance: int, load: EngineLoad, counters: EngineCounters, weight_version: int
) -> LoadInfo:
    return LoadInfo(
        instance=instance,
        num_running=load.num_running,
        num_waiting=load.num_waiting,
        num_parked=load.num_parked,
        kv_tokens_used=load.kv_tokens_used,
        kv_tokens_total=load.kv_tokens_total,
        max_running=load.max_running,
        weight_version=weight_version,
        num_preemptions=counters.num_preemptions,
        num_recomputed_tokens=counters.num_recomputed_tokens,
        num_reprefilled_tokens=counters.num_reprefilled_tokens,
        num_generated_tokens=counters.num_generated_tokens,
        num_draft_tokens=counters.num_draft_tokens,
        num_accepted_tokens=counters.num_accepted_tokens,
    )


def chunk_finished(
    msg: ChunkAssigned,
    result: ChunkResult,
    *,
    instance: int,
    start_time: float,
    end_time: float,
    load: LoadInfo,
    spec: SpecStats,
) -> ChunkFinished:
    return ChunkFinished(
        rollout_id=msg.rollout_id,
        request_id=msg.request_id,
        chunk_seq=msg.chunk_seq,
        instance=instance,
        token_ids=result.token_ids,
        logprobs=result.logprobs,
        finish_reason=result.finish_reason,
        weight_version=result.weight_version,
        start_time=start_time,
        end_time=end_time,
        num_cached_tokens=result.num_cached_tokens,
        load=load,
        error=result.error or "",
        spec=spec,
    )

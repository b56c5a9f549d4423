"""Splitting a prompt batch into groups of single-sample requests (pure).

`split(batch)` returns the groups (for the length estimator and the draft store) and the
requests (for the scheduler): one engine request per sample, never `n > 1`; sample 0 of
every group is its probe; request ids end with ";" so that no id is a prefix of another
(SGLang matches aborts by prefix); a per-sample seed is derived from the batch seed, so a
sample draws the same tokens whichever instance runs it. A bad batch raises `ValueError`.
"""

from __future__ import annotations

from dataclasses import replace

from transport.messages import PROMPT_TAIL_TOKENS, GroupInfo, PromptBatch, RequestSpec


def split(batch: PromptBatch) -> tuple[tuple[GroupInfo, ...], tuple[RequestSpec, ...]]:
    """The groups and requests of `batch` (pure; raises ValueError for a bad batch)."""
    if batch.group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {batch.group_size}")
    if batch.sampling.max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {batch.sampling.max_new_tokens}")
    if len({p.prompt_id for p in batch.prompts}) != len(batch.prompts):
        raise ValueError("prompt ids must be unique within a batch")
    groups, requests = [], []
    for g, prompt in enumerate(batch.prompts):
        if not prompt.token_ids:
            raise ValueError(f"prompt {prompt.prompt_id!r} is empty")
        if prompt.forced_lens and len(prompt.forced_lens) != batch.group_size:
            raise ValueError(f"prompt {prompt.prompt_id!r}: one forced length per sample")
        group_id = f"{batch.rollout_id}:g{g}"
        groups.append(
            GroupInfo(
                group_id=group_id,
                prompt_id=prompt.prompt_id,
                size=batch.group_size,
                prompt_tail=prompt.token_ids[-PROMPT_TAIL_TOKENS:],
            )
        )
        for i in range(batch.group_size):
            seed = batch.sampling.seed
            sampling = (
                batch.sampling
                if seed is None
                else replace(batch.sampling, seed=(seed * 1_000_003 + g * 1_009 + i) % 2**63)
            )
            requests.append(
                RequestSpec(
                    request_id=f"{group_id}:s{i};",
                    group_id=group_id,
                    prompt_id=prompt.prompt_id,
                    index=i,
                    is_probe=i == 0,
                    prompt_ids=prompt.token_ids,
                    sampling=sampling,
                    forced_len=prompt.forced_lens[i] if prompt.forced_lens else 0,
                    episode=batch.episode,
                    env_info=prompt.env_info,
                )
            )
    return tuple(groups), tuple(requests)

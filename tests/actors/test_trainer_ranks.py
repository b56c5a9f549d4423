"""Trainer ranks: 2 processes on torch.distributed (gloo), started with the torchrun
environment, take the same GRPO step as one rank on all the samples."""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

from actors.dispatcher.core import group_advantage_message
from actors.trainer import OffPolicyError, compute_advantages
from actors.trainer.core import SamplingTransform
from actors.trainer.ranks import RankEnv, RankError
from tests.actors import ranks_worker as w

ROOT = Path(__file__).parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_ranks(tmp_path: Path, world: int) -> list[dict]:
    port = free_port()
    procs = []
    for rank in range(world):
        env = os.environ | RankEnv(rank=rank, world_size=world, master_port=port).to_env()
        env["PYTHONPATH"] = str(ROOT)
        cmd = [sys.executable, "-m", "tests.actors.ranks_worker", str(tmp_path / "out")]
        procs.append(subprocess.Popen(cmd, env=env, cwd=ROOT))
    try:
        for p in procs:
            assert p.wait(timeout=100) == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return [torch.load(tmp_path / f"out-{r}.pt", weights_only=True) for r in range(world)]


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_two_rank_step_equals_one_rank_step(tmp_path: Path) -> None:
    """Two processes started with the torchrun environment (gloo) against GRPOTrainer.step
    on all the samples in this process; then the same at temperature 0.7 (logprobs under
    the sampling transform) against one rank, and against ignoring the transform."""
    ranks = run_ranks(tmp_path, 2)
    results = [r["1.0"] for r in ranks]
    single = w.trainer()
    stats = single.step(w.samples())  # GRPOTrainer.step on all samples
    reference = single.model.state_dict()
    before = w.model().state_dict()
    for res in results:  # every rank holds the same new weights, equal to the 1-rank step
        for name, tensor in reference.items():
            assert not torch.equal(tensor, before[name]) or "norm" in name
            torch.testing.assert_close(res["state"][name], tensor, rtol=1e-5, atol=1e-6)
    got = results[0]["stats"]
    assert got["num_samples"] == stats["num_samples"] == len(w.samples())
    assert got["num_skipped_groups"] == stats["num_skipped_groups"] >= 1  # g0 is flat
    for key in ("loss", "grad_norm", "clip_fraction", "num_tokens", "reward_mean"):
        assert got[key] == pytest.approx(stats[key], rel=1e-5, abs=1e-7), key
    assert sum(r["stats"]["num_local_samples"] for r in results) == len(w.samples())

    transform = SamplingTransform(temperature=0.7)
    one = w.trainer()
    one.step_shard(w.samples(transform), transform=transform)
    plain = w.trainer()
    plain.step_shard(w.samples(transform))  # wrong transform: differs
    for name, tensor in one.model.state_dict().items():
        torch.testing.assert_close(ranks[1]["0.7"]["state"][name], tensor, rtol=1e-5, atol=1e-6)
    pairs = zip(one.model.state_dict().values(), plain.model.state_dict().values(), strict=True)
    diff = max(float((a - b).abs().max()) for a, b in pairs)
    assert diff > 1e-4


@pytest.mark.parametrize("temperature,top_k,top_p", [(0.7, 0, 1.0), (1.3, 5, 1.0), (0.9, 0, 0.8),
                                                     (0.0, 0, 1.0)])  # fmt: skip
def test_transformed_logprobs_match_the_generator_sampler(
    temperature: float, top_k: int, top_p: float
) -> None:
    from actors.generator.builtin.sampler import SamplingBatch, sampling_probs

    logits = torch.randn(2, 5, 32, generator=torch.Generator().manual_seed(0)) * 3
    flat = logits.reshape(10, 32)
    probs = sampling_probs(
        flat,
        SamplingBatch.build(
            [max(temperature, 1e-9)] * 10, [top_k] * 10, [top_p] * 10, [0] * 10, list(range(10))
        ),
    )
    if temperature == 0:  # greedy: the model's own distribution, as the sampler reports
        probs = torch.softmax(flat, -1)
    targets = probs.argmax(-1).reshape(2, 5)  # a token the filter keeps
    expected = probs.gather(-1, targets.reshape(10, 1)).log().reshape(2, 5)
    got = SamplingTransform(temperature, top_k, top_p).logprobs(logits, targets)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_one_rank_shard_step_equals_core_step() -> None:
    a, b = w.trainer(), w.trainer()
    sa = a.step(w.samples())
    sb = b.step_shard(w.samples())
    assert sa["loss"] == pytest.approx(sb["loss"], rel=1e-6)
    for name, tensor in a.model.state_dict().items():
        torch.testing.assert_close(b.model.state_dict()[name], tensor)
    assert b.version == 1


def test_step_credit_with_advantages_given_equals_core_step() -> None:
    """Direct dispatch hands a rank the advantages computed where each group completed; with
    step credit (located mistakes, one in a flat all-failed group) the rank trains exactly as
    `GRPOTrainer` does on the same samples: same rows kept, same loss, same weights."""
    located = []
    for s in w.samples():
        wrong = s.reward < 1.0 and len(s.completion_ids) > 1
        located.append(dataclasses.replace(s, error_index=1 if wrong else -1))
    flat = [dataclasses.replace(s, reward=0.0) for s in located if s.group_id == "g1"]
    located = [s for s in located if s.group_id != "g1"] + [
        dataclasses.replace(s, error_index=min(1, len(s.completion_ids) - 1)) for s in flat
    ]
    assert any(s.error_index >= 0 for s in located)
    sizes = Counter(s.group_id for s in located)
    rewards = {g: {s.reward for s in located if s.group_id == g} for g in sizes}
    given = compute_advantages(located).tolist()  # what the dispatcher sends per group
    share = [1 / sizes[s.group_id] if len(rewards[s.group_id]) == 1 else 0.0 for s in located]
    a, b = w.trainer(), w.trainer()
    sa = a.step(located)
    sb = b.step_shard(located, advantages=given, flat_share=share)
    assert sa["num_tokens"] == sb["num_tokens"]
    assert sa["num_skipped_groups"] == sb["num_skipped_groups"] == 1  # g0 (all right) only
    assert sa["loss"] == pytest.approx(sb["loss"], rel=1e-6)
    for name, tensor in a.model.state_dict().items():
        torch.testing.assert_close(b.model.state_dict()[name], tensor)


def test_off_policy_shard_refused_before_anything_changes() -> None:
    t = w.trainer()
    before = {k: v.clone() for k, v in t.model.state_dict().items()}
    with pytest.raises(OffPolicyError):
        t.step_shard([dataclasses.replace(s, weight_versions=(1,)) for s in w.samples()])
    assert t.version == 0
    assert all(torch.equal(before[k], v) for k, v in t.model.state_dict().items())


def test_a_flat_group_with_some_mistakes_located_trains_alike_on_one_rank_and_several() -> None:
    """One rule for which rows train (`rows_to_train`): a flat (all-failed) group in which
    step credit located only some mistakes trains its located members alone and counts the
    rest as their shares of a skipped group, whether one rank computes it (`step`) or the
    dispatcher's advantages reach a rank (`step_shard`, advantages and flatness from
    `group_advantage_message`, as the dispatcher sends them)."""
    samples = []
    for s in w.samples():
        if s.group_id == "g1":  # all failed; mistakes located in the first two only
            located = s.request_id in ("g1-0", "g1-1") and len(s.completion_ids) > 1
            s = dataclasses.replace(s, reward=0.0, error_index=1 if located else -1)
        samples.append(s)
    assert sum(s.error_index >= 0 for s in samples) == 2
    given: dict[str, tuple[float, float]] = {}
    given_groups = list(dict.fromkeys(s.group_id for s in samples))
    for gid in given_groups:
        members = [(s.request_id, s.reward) for s in samples if s.group_id == gid]
        msg = group_advantage_message(0, gid, members)
        share = 1.0 / len(msg.request_ids) if msg.is_flat else 0.0
        given |= {r: (a, share) for r, a in zip(msg.request_ids, msg.advantages, strict=True)}
    a, b = w.trainer(), w.trainer()
    sa = a.step(samples)
    sb = b.step_shard(
        samples,
        advantages=[given[s.request_id][0] for s in samples],
        flat_share=[given[s.request_id][1] for s in samples],
    )
    assert sa["num_tokens"] == sb["num_tokens"]
    flat = sum(len({s.reward for s in samples if s.group_id == g}) == 1 for g in given_groups)
    # every flat group skipped whole, but g1 only by its two unlocated members' shares
    assert sa["num_skipped_groups"] == sb["num_skipped_groups"] == pytest.approx(flat - 0.5)
    assert sa["loss"] == pytest.approx(sb["loss"], rel=1e-6)
    for name, tensor in a.model.state_dict().items():
        torch.testing.assert_close(b.model.state_dict()[name], tensor)


def test_rank_env_reads_torchrun_variables() -> None:
    env = RankEnv.from_env({"RANK": "1", "WORLD_SIZE": "4", "MASTER_PORT": "1234",
                            "LOCAL_RANK": "1", "MASTER_ADDR": "10.0.0.2"})  # fmt: skip
    assert (env.rank, env.world_size, env.master_addr, env.master_port) == (1, 4, "10.0.0.2", 1234)
    assert RankEnv.from_env(env.to_env()) == env
    assert RankEnv.from_env({}) == RankEnv()
    with pytest.raises(RankError):
        RankEnv.from_env({"RANK": "4", "WORLD_SIZE": "4"})
    with pytest.raises(RankError):
        RankEnv.from_env({"RANK": "x"})

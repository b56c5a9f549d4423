"""One trainer rank of the multi-rank test, started like torchrun starts a rank: the process
reads RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT, trains its shard of `samples()` with
`RankedGRPOTrainer.step_shard`, and writes its weights and stats to argv[1]-<rank>.pt."""

from __future__ import annotations

import sys

import torch

from actors.model import LlamaModel, ModelConfig
from actors.trainer import TrainSample, make_batch, token_logprobs
from actors.trainer.parallel import RankedGRPOTrainer, SamplingTransform
from actors.trainer.ranks import RankEnv, close_ranks, init_ranks

CFG = ModelConfig(
    vocab_size=32, hidden=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate=64,
    max_context=64,
)  # fmt: skip
NUM_GROUPS, GROUP_SIZE = 6, 4


def model() -> LlamaModel:
    return LlamaModel.random(CFG, seed=3, std=0.2)


def samples(transform: SamplingTransform | None = None) -> list[TrainSample]:
    """Groups of varied lengths and rewards; old logprobs near the model's own (ratios != 1)."""
    transform = transform or SamplingTransform()
    g = torch.Generator().manual_seed(11)
    out = []
    m = model()
    for gi in range(NUM_GROUPS):
        prompt = tuple(int(t) for t in torch.randint(1, 32, (2 + gi % 3,), generator=g))
        rewards = [float(r) for r in torch.randint(0, 2, (GROUP_SIZE,), generator=g)]
        if gi == 0:
            rewards = [1.0] * GROUP_SIZE  # a flat group: skipped on whichever rank holds it
        for si in range(GROUP_SIZE):
            n = int(torch.randint(1, 12, (1,), generator=g))
            comp = tuple(int(t) for t in torch.randint(1, 32, (n,), generator=g))
            probe = TrainSample(prompt, comp, (0.0,) * n, 0.0, "x", (0,))
            batch = make_batch([probe], pad_id=0)
            with torch.no_grad():
                logits = m(batch.input_ids)
                lp = (
                    token_logprobs(logits, batch.targets)
                    if transform.is_identity
                    else transform.logprobs(logits, batch.targets)
                )[0][batch.mask[0] > 0]
            noise = 0.3 * torch.randn(n, generator=g)
            out.append(
                TrainSample(
                    prompt_ids=prompt,
                    completion_ids=comp,
                    old_logprobs=tuple((lp + noise).tolist()),
                    reward=rewards[si],
                    group_id=f"g{gi}",
                    weight_versions=(0,),
                    request_id=f"g{gi}-{si}",
                )
            )
    return out


def shard(all_samples: list[TrainSample], rank: int, world: int) -> list[TrainSample]:
    """Whole groups, round-robin by group (any whole-group split must give the same step)."""
    return [s for s in all_samples if int(s.group_id[1:]) % world == rank]


def trainer() -> RankedGRPOTrainer:
    """Plain SGD: AdamW's first step is lr * sign(grad), which turns the rounding noise of
    near-zero gradients into full-size differences; SGD shows the gradient itself."""
    t = RankedGRPOTrainer(model(), lr=1e-2, micro_batch_size=3, clip_eps=0.2, seed=5)
    t.optimizer = torch.optim.SGD(t.model.parameters(), lr=1.0)
    return t


def dataclasses_replace_version(sample: TrainSample, version: int) -> TrainSample:
    import dataclasses

    return dataclasses.replace(sample, weight_versions=(version,))


TEMPERATURES = (1.0, 0.7)


def main() -> None:
    """One step per temperature, each from fresh weights; argv[1]-<rank>.pt holds them all."""
    out = sys.argv[1]
    env = RankEnv.from_env()
    torch.set_num_threads(1)
    init_ranks(env, timeout_s=60)
    results = {}
    for temperature in TEMPERATURES:
        transform = SamplingTransform(temperature=temperature)
        t = trainer()
        data = shard(samples(transform), env.rank, env.world_size)
        stats = t.step_shard(data, transform=transform)
        results[str(temperature)] = {"state": t.model.state_dict(), "stats": stats}
    torch.save(results, f"{out}-{env.rank}.pt")
    close_ranks()


if __name__ == "__main__":
    main()

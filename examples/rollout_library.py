"""Use seer-rl's rollout from your own trainer (veRL, slime, a hand-written loop).

Run: .venv/bin/python examples/rollout_library.py

It launches the rollout actors (splitter, length estimator, scheduler, 2 generator
processes with the built-in engine on a tiny random model), rolls out 4 prompts x 8
samples with Seer's context-aware scheduler, publishes new weights as a trainer would,
rolls out again on-policy, and saves the rollout's metrics, timeline and trace.
"""

from __future__ import annotations

import anyio
import torch

from actors.model import ModelOptions, build_model
from pipeline.rollout import Rollout, rollout_config
from transport.messages import SamplingSpec

MODEL = {
    "hidden": 64,
    "num_layers": 2,
    "num_heads": 4,
    "num_kv_heads": 2,
    "intermediate": 128,
    "max_context": 512,
}
GENERATOR = {"model": MODEL, "max_batch": 16}


async def main() -> None:
    config = rollout_config(num_generators=2, policy="context_aware", generator=GENERATOR)
    prompts = [[1, 2, 3, 4], [10, 20, 30], [7, 7, 7, 7, 7], [42]]
    sampling = SamplingSpec(temperature=1.0, top_p=0.95, seed=1234, max_new_tokens=64)
    async with Rollout(config) as rollout:
        result = await rollout.generate_with_record(prompts, group_size=8, sampling=sampling)
        for group in result.groups:
            lengths = [len(s.token_ids) for s in group.samples]
            print(f"{group.prompt_id}: {len(group.samples)} samples, lengths {lengths}")
        # ... your trainer computes rewards and a policy-gradient step here ...
        model = build_model(ModelOptions(**MODEL, seed=7))
        with torch.no_grad():
            await rollout.update_weights(model.state_dict(), version=1)
        again = await rollout.generate(prompts, group_size=8, sampling=sampling)
        versions = {v for g in again for s in g.samples for v in s.weight_versions}
        print(f"second rollout generated with weight versions {versions}")
    paths = result.save("runs/example-rollout")
    print(
        "metrics:",
        {
            k: round(v, 3)
            for k, v in result.metrics().items()
            if k in ("makespan_s", "throughput_tok_s", "tail_s")
        },
    )
    print("saved", ", ".join(str(p) for p in paths.values()))


if __name__ == "__main__":
    anyio.run(main)

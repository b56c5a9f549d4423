"""The driver of a static deployment: attach to the actors, roll out once, stop them.

python examples/cluster/drive.py --config run.toml --registry /shared/seer/registry
python examples/cluster/drive.py --config run.toml          (fixed hosts in the config)
"""

from __future__ import annotations

import argparse

import anyio

from pipeline.config import load_config
from pipeline.rollout.api import Rollout
from transport.messages import SamplingSpec


async def main(config_path: str, registry: str) -> None:
    config = load_config(config_path)
    options = {"registry": registry} if registry else {}
    async with Rollout(config, mode="static", launcher_options=options) as rollout:
        groups = await rollout.generate(
            [[5, 6, 7], [8, 9]], group_size=4, sampling=SamplingSpec(max_new_tokens=32)
        )
    for group in groups:
        print(group.prompt_id, [len(s.token_ids) for s in group.samples])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", required=True)
    parser.add_argument("--registry", default="")
    args = parser.parse_args()
    anyio.run(main, args.config, args.registry)

"""Write the rollout topology as TOML for a static (Slurm / Kubernetes) deployment.

    python examples/cluster/make_config.py --keys /shared/seer/keys --run-id job42 > run.toml
    python examples/cluster/make_config.py --keys /keys --hosts seer-0.seer,seer-1.seer,...

`--hosts`: fixed addresses instead of a registry, one per actor in topology order
(splitter, estimator, scheduler, generators..., draft store), e.g. a StatefulSet's pods.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from pipeline.config import Topology, config_to_toml
from pipeline.rollout.api import rollout_config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keys", required=True, help="the CURVE key folder (seer keys DIR)")
    parser.add_argument("--run-id", default="seer")
    parser.add_argument("--generators", type=int, default=2)
    parser.add_argument("--hosts", default="", help="comma-separated, one per actor")
    parser.add_argument("--driver-host", default="", help="--hosts: where the driver runs")
    args = parser.parse_args()
    config = rollout_config(num_generators=args.generators, run_id=args.run_id)
    transport = dataclasses.replace(config.transport, scheme="tcp", curve_keys=args.keys)
    if args.hosts:
        hosts = args.hosts.split(",")
        if len(hosts) != len(config.topology.instances()):
            sys.exit(f"--hosts names {len(hosts)} hosts for {len(config.topology.instances())}")
        groups, start = [], 0
        for g in config.topology.actors:
            groups.append(dataclasses.replace(g, hosts=tuple(hosts[start : start + g.count])))
            start += g.count
        config = dataclasses.replace(config, topology=Topology(actors=tuple(groups)))
        transport = dataclasses.replace(transport, host=args.driver_host or hosts[0])
    sys.stdout.write(config_to_toml(dataclasses.replace(config, transport=transport)))


if __name__ == "__main__":
    main()

"""Write the TOML of a static (Slurm / Kubernetes) deployment: a whole RL run (`--rl`: a
`RunConfig` for `seer run --config`), or the rollout topology alone (for `seer actor` and
examples/cluster/drive.py).

    python examples/cluster/make_config.py --rl --keys /shared/seer/keys --run-id job42 \\
        --registry /shared/seer/registry > run.toml
    seer run --config run.toml --write-actors-config actors.toml   # what `seer actor` runs
    python examples/cluster/make_config.py --keys /shared/seer/keys --run-id job42 > rollout.toml
    python examples/cluster/make_config.py --keys /keys --hosts seer-0.seer,seer-1.seer,...

`--hosts`: fixed addresses instead of a registry, one per actor in topology order
(splitter, estimator, scheduler, generators..., draft store, then with `--rl` the trainer
ranks), e.g. a StatefulSet's pods. `--driver-host`: where the driver runs (with `--hosts`).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import tomli_w

from pipeline.config import Topology, TransportConfig, config_to_toml
from pipeline.rollout.api import rollout_config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keys", required=True, help="the CURVE key folder (seer keys DIR)")
    parser.add_argument("--run-id", default="seer")
    parser.add_argument("--generators", type=int, default=2)
    parser.add_argument("--hosts", default="", help="comma-separated, one per actor")
    parser.add_argument("--driver-host", default="", help="--hosts: where the driver runs")
    parser.add_argument("--rl", action="store_true", help="a RunConfig for `seer run`")
    parser.add_argument("--trainer-ranks", type=int, default=2, help="--rl: trainer ranks")
    parser.add_argument("--registry", default="", help="--rl: the shared registry folder")
    parser.add_argument("--iterations", type=int, default=40, help="--rl: RL iterations")
    parser.add_argument(
        "--cache-dir", default="", help="--rl: the warm start's cache, on a folder every host sees"
    )
    args = parser.parse_args()
    if args.rl:
        sys.stdout.write(run_toml(args))
        return
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


def run_toml(args: argparse.Namespace) -> str:
    """A `RunConfig` table for `seer run` in mode "static" over tcp + CURVE."""
    from pipeline.rl.config import RunConfig, rl_topology

    transport = TransportConfig(curve_keys=args.keys, host=args.driver_host or "127.0.0.1")
    table: dict[str, object] = {
        "mode": "static",
        "run_id": args.run_id,
        "iterations": args.iterations,
        "num_generators": args.generators,
        "trainer_ranks": args.trainer_ranks,
        "transport": {"curve_keys": args.keys},
    }
    if args.driver_host:
        table["transport"] = {"curve_keys": args.keys, "host": args.driver_host}
    if args.registry:
        table["registry"] = args.registry
    if args.cache_dir:  # the actors load the warm-started model the driver's host made
        table["cache_dir"] = args.cache_dir
    if args.hosts:  # role by role, in the order of the run's topology
        cfg = RunConfig(
            mode="static", run_id=args.run_id, transport=transport, warm_start_steps=0,
            num_generators=args.generators, trainer_ranks=args.trainer_ranks,
        )  # fmt: skip
        instances = rl_topology(cfg, "").topology.instances()
        hosts = args.hosts.split(",")
        if len(hosts) != len(instances):
            sys.exit(f"--hosts names {len(hosts)} hosts for {len(instances)} actors")
        placed: dict[str, list[str]] = {}
        for (role, _), host in zip(instances, hosts, strict=True):
            placed.setdefault(role, []).append(host)
        table["hosts"] = placed
    return tomli_w.dumps(table)


if __name__ == "__main__":
    main()

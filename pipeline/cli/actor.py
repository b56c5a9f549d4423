"""`seer actor`: start one actor of a topology in this process (by hand, or from a static rank)."""

from __future__ import annotations

import argparse
import sys


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    actor = sub.add_parser("actor", help="start one actor of a topology by hand")
    actor.add_argument("--config", required=True)
    actor.add_argument("--role", help="default: the rank-th actor (SEER_RANK, SLURM_PROCID...)")
    actor.add_argument("--index", type=int, default=0)
    actor.add_argument("--registry", help="shared folder where actors publish their addresses")
    actor.add_argument("--host", default="", help="registry: address to bind (default: outward)")
    return actor


def run(args: argparse.Namespace) -> int:
    """Build the actor named by --role/--index (or by the rank) and run it until it stops."""
    import os

    import anyio

    from pipeline.config import load_config
    from pipeline.launch.registry import build_actor, zmq_transport
    from pipeline.logs import configure_logging

    config = load_config(args.config)
    configure_logging(config.log_level)
    if args.role is None:  # static launch: which actor this is comes from the rank
        from pipeline.launch.static import actor_for_rank, rank_from_env

        rank = rank_from_env(os.environ)
        if rank is None:
            raise ValueError("give --role (and --index), or set SEER_RANK / SLURM_PROCID / RANK")
        args.role, args.index = actor_for_rank(config, rank)
    if args.registry:
        from pipeline.launch.static import run_registered_actor

        run_registered_actor(config, args.role, args.index, args.registry, host=args.host)
        return 0
    transport = zmq_transport(config)
    actor = build_actor(config, args.role, args.index, transport, in_process=False)
    # SEER_PROFILE="<role>:<path>": cProfile this actor's process (`seer bench scheduler`)
    role, _, path = os.environ.get("SEER_PROFILE", "").partition(":")
    if role != args.role or not path:
        anyio.run(actor.run)
        # a clean stop is complete (on_stop ran, ActorStopped sent, sockets closed): exit
        # now rather than wait on interpreter teardown (seen taking over 10 s, until the
        # launcher's SIGTERM, after every clean stop)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    import cProfile

    with cProfile.Profile() as profiler:
        anyio.run(actor.run)
    profiler.dump_stats(path)
    return 0

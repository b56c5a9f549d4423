"""`seer keys <directory>`: create the CURVE key pair that secures tcp deployments."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    keys = sub.add_parser("keys", help="create a CURVE key pair for tcp deployments")
    keys.add_argument("directory")
    return keys


def run(args: argparse.Namespace) -> int:
    """Write the cluster key pair into the given directory."""
    from transport.security import generate_keys

    path = generate_keys(args.directory)
    print(f"wrote the cluster key pair to {path.parent} (copy it to every host; never commit it)")
    return 0

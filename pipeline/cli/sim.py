"""`seer sim NAME`: the rollout simulator: validate it, run Seer's scale, or split a gap.

Each simulator command's module declares its flags (`add_arguments`) and runs from them
(`run_args`); `--json` every one takes. `seer sim NAME --help` lists that command's flags.
"""

from __future__ import annotations

import argparse

from pipeline.cli.lazy import Command, add_commands, run_chosen

SIMS = {
    "validate": Command(
        "pipeline.sim.validate", "the simulator against live rollouts on this machine"
    ),
    "seer": Command(
        "pipeline.sim.seer_command", "Seer's ablation at Seer's scale on the H200 tables"
    ),
    "gap": Command(
        "pipeline.sim.gap", "context-aware's gap to the oracle at Seer's scale, by cause"
    ),
    "agentic": Command(
        "pipeline.sim.agentic", "multi-turn episodes with environment latency at Seer's scale"
    ),
}


def common_flags(parser: argparse.ArgumentParser) -> None:
    """The flags every simulator command takes."""
    parser.add_argument("--json", help="write the result as JSON here (a PNG beside it)")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    sim = sub.add_parser(
        "sim",
        help="the rollout simulator: validate it, run Seer's scale, or split context-aware's "
        "gap to the oracle into its causes",
        description="The rollout simulator; `seer sim NAME --help` lists a command's flags.",
    )
    add_commands(sim, "what", SIMS, common_flags)
    return sim


run = run_chosen

"""`seer bench NAME`: the benchmarks that compare variants side by side (pipeline/bench/).

Each bench module declares its flags (`add_arguments`) and runs from them (`run_args`);
`--json` and `--quick` every bench takes. `seer bench NAME --help` lists that bench's flags.
"""

from __future__ import annotations

import argparse

from pipeline.cli.lazy import Command, add_commands, run_chosen

BENCHES = {
    "transport": Command(
        "pipeline.bench.transport", "our sockets beside raw pyzmq: rate, latency, bandwidth"
    ),
    "engine": Command(
        "pipeline.bench.engine", "the built-in engine's decode tokens/s beside HF generate"
    ),
    "rollout": Command(
        "pipeline.bench.rollout_command", "one workload under the four scheduling policies"
    ),
    "drafts": Command("pipeline.bench.drafts", "grouped speculative decoding on real rollouts"),
    "scheduler": Command(
        "pipeline.bench.scheduler", "the control plane alone, driving stand-in generators"
    ),
    "serve": Command("pipeline.bench.serve", "what SGLang's HTTP API costs over the engine"),
    "faults": Command("pipeline.bench.faults", "each actor kind killed mid-run: what happens"),
    "dispatch": Command(
        "pipeline.bench.dispatch", "Earl's data dispatcher against gather-then-scatter"
    ),
    "layouts": Command("pipeline.bench.layouts", "generator layouts by context length"),
    "eviction": Command("pipeline.bench.eviction", "the engine's parked-KV eviction rules"),
    "agentic": Command("pipeline.bench.agentic", "multi-turn episodes under the four policies"),
}


def common_flags(parser: argparse.ArgumentParser) -> None:
    """The flags every bench takes."""
    parser.add_argument("--json", help="write the result as JSON here")
    parser.add_argument("--quick", action="store_true", help="smaller sizes (smoke test)")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    bench = sub.add_parser(
        "bench",
        help="benchmarks that compare variants side by side",
        description="Benchmarks that compare variants side by side; `seer bench NAME --help` "
        "lists a bench's flags.",
    )
    add_commands(bench, "name", BENCHES, common_flags)
    return bench


run = run_chosen

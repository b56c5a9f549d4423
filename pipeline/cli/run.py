"""`seer run`: the main job, GRPO on the embedded default task with a run folder and report."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actors.scheduler.policy import POLICY_NAMES

if TYPE_CHECKING:
    from pipeline.rl.config import RunConfig

#: `--policy`'s choices: what an RL run takes (not "oracle": it needs true lengths); the
#: same as `pipeline.rl.config.RUN_POLICIES`, which `tests/pipeline/test_cli.py` checks
RUN_POLICIES = tuple(p for p in POLICY_NAMES if p != "oracle")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    # allow_abbrev=False: the retired --warm-start-s (seconds) must not pass as an
    # abbreviation of --warm-start-steps
    run = sub.add_parser(
        "run", help="the main job: GRPO on the embedded default task", allow_abbrev=False
    )
    run.add_argument("--config", help="TOML mapping onto RunConfig (pipeline/rl/config.py)")
    run.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a RunConfig field over the TOML, dotted for a table: --set "
        "generator.max_batch=64 --set trainer.lr=5e-4 (repeat; the value is TOML, a bare "
        "word is text); the flags below apply after",
    )
    run.add_argument(
        "--print-config", action="store_true", help="print the resolved config (TOML) and exit"
    )
    run.add_argument(
        "--task",
        help="a registered task (countdown, ...) or a factory 'package.module:make_task' "
        "(importable from the working directory)",
    )
    run.add_argument(
        "--model",
        help="a Hugging Face model folder (Llama 3, Qwen2, Qwen3) to train instead of the "
        "built-in toy (no warm start; its tokenizer serves text tasks)",
    )
    run.add_argument(
        "--policy",
        choices=[p for p in RUN_POLICIES if p],
        help="rollout scheduling (default: context_aware)",
    )
    run.add_argument("--iterations", type=int)
    run.add_argument(
        "--warm-start-steps", type=int, help="supervised warm start optimiser steps (0: none)"
    )
    run.add_argument(
        "--resume",
        metavar="FOLDER",
        help="a run folder: continue it there from its config.toml and latest checkpoint "
        "(--set and the flags change fields); or a checkpoint folder: start from it in a new "
        "run folder with this command's config",
    )
    run.add_argument(
        "--trainer-ranks", type=int, help="data-parallel trainer ranks (torch.distributed)"
    )
    run.add_argument(
        "--dispatch",
        choices=("direct", "driver"),
        help="with --trainer-ranks > 1: direct (default; the scheduler scores each sample and "
        "sends it to its rank as it finishes) or driver (gather, score, then send: comparison)",
    )
    run.add_argument("--out", help="run folder (default: runs/run-<time>)")
    run.add_argument(
        "--report-to",
        action="append",
        metavar="SINKS",
        help="experiment trackers besides metrics.jsonl, comma-separated or repeated: "
        "tensorboard, wandb (offline unless WANDB_MODE is set), none; files in the run folder",
    )
    run.add_argument("--backend", choices=("builtin", "sglang"), help="the generators' engine")
    run.add_argument(
        "--sglang-url",
        action="append",
        help="sglang: attach a generator to this server (repeat: one per generator)",
    )
    run.add_argument(
        "--sglang-command",
        help="sglang: launch each generator's server with this command line ({python}, "
        "{model}, {host}, {port}, {tp_size} filled in; default: python -m "
        "sglang.launch_server ...)",
    )
    run.add_argument(
        "--sglang-router",
        action="store_true",
        help="sglang: start SGLang's router (seer-rl[router]) in front of the --sglang-url "
        "servers; /generate goes through it, pinned to the server our scheduler chose",
    )
    run.add_argument(
        "--write-actors-config",
        metavar="PATH",
        help="mode 'static': write the topology every host's `seer actor --config PATH` runs "
        "(after the warm start, if any, into the shared cache_dir) and exit",
    )
    return run


def run(args: argparse.Namespace) -> int:
    """The main job: synchronous GRPO on the embedded default task, every Seer mechanism
    that has landed switched on, live progress, and a run folder with the report."""
    import anyio
    from rich.console import Console

    from pipeline.logs import configure_logging
    from pipeline.records.plot import PLOT_HINT, can_plot, plot_timeline
    from pipeline.records.trace import load_trace
    from pipeline.rl.loop import train
    from pipeline.rl.report import LiveReport, plot_rewards, summary_table

    configure_logging("warning")
    console = Console(width=130)
    cfg = run_config(args)
    if args.print_config:
        from pipeline.rl.runfolder import config_toml

        print(config_toml(cfg), end="")
        return 0
    if args.write_actors_config:
        from pipeline.config import save_config
        from pipeline.rl.config import actors_config

        path = save_config(actors_config(cfg), args.write_actors_config)
        console.print(f"wrote {path}: start `seer actor --config {path}` on every host")
        return 0
    out = cfg.out_dir
    gen = cfg.generator
    if args.sglang_router and not (gen.backend == "sglang" and gen.sglang.urls):
        raise ValueError("--sglang-router needs SGLang servers given by URL (--sglang-url)")
    console.print(
        f"[bold]seer run[/]: {cfg.task}, {cfg.iterations} iterations x "
        f"{cfg.prompts_per_iteration} prompts x {cfg.group_size} samples, policy "
        f"{cfg.policy or 'context_aware'}, {cfg.num_generators} generators; run folder {out}"
    )
    if args.sglang_router:
        rows = anyio.run(_train_routed, cfg, LiveReport(console))
    else:
        rows = anyio.run(train, cfg, LiveReport(console))
    folder = Path(out)
    pngs = "reward.png, rollout-timeline.png"
    if can_plot():
        plot_rewards(rows, folder / "reward.png")
        trace = folder / "last-rollout" / "trace.json"
        if trace.exists():
            record = load_trace(trace)
            plot_timeline({record.policy: record}, folder / "rollout-timeline.png")
    else:
        pngs = f"no PNG plots ({PLOT_HINT})"
    console.print(summary_table(rows, f"{len(rows)} iterations ({cfg.policy or 'context_aware'})"))
    last = rows[-1] if rows else {}
    if "eval_reward_before" in last:
        console.print(
            f"held-out reward (fixed prompts and seeds): {last['eval_reward_before']:.3f}"
            f" before training -> {last['eval_reward']:.3f} after {len(rows)} iterations"
            + (
                f" (success {last['eval_success_before']:.3f} -> {last['eval_success']:.3f})"
                if last.get("eval_success") != last["eval_reward"]
                else ""
            )
            + (
                f", mean turns {last['eval_mean_turns_before']:.2f} -> "
                f"{last['eval_mean_turns']:.2f}"
                if "eval_mean_turns" in last
                else ""
            )
        )
    console.print(f"wrote {folder}/metrics.jsonl, {pngs}")
    if "tensorboard" in cfg.report_to:
        console.print(f"TensorBoard: tensorboard --logdir {folder}/tensorboard")
    if "wandb" in cfg.report_to:
        console.print(
            f"wandb: {folder}/wandb/ (offline: upload with "
            f"`wandb sync {folder}/wandb/offline-run-*`)"
        )
    return 0


def run_config(args: argparse.Namespace) -> RunConfig:
    """The run's `RunConfig`: the `--config` TOML (`[generator]`, `[trainer]` tables; keys
    left out keep RunConfig's defaults) or, with `--resume RUN_FOLDER`, that folder's saved
    `config.toml`; then the `--set` assignments; then the flags."""
    import dataclasses
    import time

    from pipeline.config import ConfigError, apply_overrides
    from pipeline.rl.config import RunConfig
    from pipeline.rl.runfolder import CONFIG_FILE, load_run_config, resume_from

    resume_folder = bool(args.resume) and (Path(args.resume) / CONFIG_FILE).is_file()
    cfg: RunConfig
    if resume_folder:
        if args.config:
            raise ConfigError(
                f"--resume {args.resume} continues from its {CONFIG_FILE}: leave out --config "
                "(change fields with --set)"
            )
        if args.out and Path(args.out).absolute() != Path(args.resume).absolute():
            raise ConfigError(f"--resume {args.resume} continues in that folder: leave out --out")
        cfg, checkpoint = resume_from(args.resume)
        cfg = dataclasses.replace(cfg, out_dir=args.resume, resume=str(checkpoint))
    else:
        cfg = load_run_config(args.config) if args.config else RunConfig()
    cfg = apply_overrides(cfg, args.set)
    changes: dict[str, Any] = {
        k: v
        for k, v in (
            ("task", args.task),
            ("model", args.model),
            ("policy", args.policy),
            ("iterations", args.iterations),
            ("resume", None if resume_folder else args.resume),
            ("warm_start_steps", args.warm_start_steps),
            ("trainer_ranks", args.trainer_ranks),
            ("dispatch", args.dispatch),
            ("report_to", report_to(args.report_to)),
        )
        if v is not None
    }
    if args.backend or args.sglang_url or args.sglang_command:
        from pipeline.launch.backend import use_backend

        gen = use_backend(
            cfg.generator, args.backend, urls=args.sglang_url or (), command=args.sglang_command
        )
        changes["generator"] = gen
        if gen.sglang.urls and gen.backend == "sglang":
            changes["num_generators"] = len(gen.sglang.urls)
    if not resume_folder:
        changes["out_dir"] = args.out or f"runs/run-{time.strftime('%Y%m%d-%H%M%S')}"
    return dataclasses.replace(cfg, **changes)


def report_to(values: list[str] | None) -> tuple[str, ...] | None:
    """`--report-to` values (comma-separated, repeatable; "none" clears the TOML's list) as
    `RunConfig.report_to`, or None when the flag is not given."""
    if values is None:
        return None
    names = [n.strip() for v in values for n in v.split(",") if n.strip()]
    return tuple(dict.fromkeys(n for n in names if n != "none"))


async def _train_routed(cfg: Any, report: Any) -> Any:
    """`train` with SGLang's router in front of the run's servers (its log in the run folder)."""
    import dataclasses

    from pipeline.launch.backend import routed
    from pipeline.rl.loop import train

    log = Path(cfg.out_dir) / "sglang-router.log"
    async with routed(cfg.generator, log) as gen:
        return await train(dataclasses.replace(cfg, generator=gen), report)

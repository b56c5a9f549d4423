"""The synchronous RL loop: start the actors; each iteration roll out, score, train and
publish the new weights; stop. It reads top to bottom as the algorithm."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from actors.model.hf_folder import read_folder
from pipeline.records.metrics import rollout_figures
from pipeline.records.sinks import check_sinks
from pipeline.rl.config import (
    RunConfig,
    launcher_options,
    rl_topology,
    task_model_dir,
    warm_model,
)
from pipeline.rl.layout_switch import current_layout, make_selector, switch_layout
from pipeline.rl.ranks import load_on_every_rank, stream_spec, train_across_ranks, train_streamed
from pipeline.rl.runfolder import keep_rows_before, make_room, save_run_config
from pipeline.rl.steps import send_train_step
from pipeline.rl.tracking import (
    SAMPLE_COLUMNS,
    SAMPLE_TABLE,
    is_sample_iteration,
    run_tracker,
    sample_rows,
)
from pipeline.rollout import Rollout
from pipeline.rollout.api import Group, RolloutError, RolloutResult
from pipeline.tasks import (
    Task,
    TaskPrompt,
    check_episode_budget,
    check_prompt_lengths,
    episode_spec,
    get_task,
    stop_token_ids,
)
from pipeline.tasks.curriculum import Curriculum
from pipeline.tasks.scoring import first_error_index, safe_reward
from transport.messages import (
    PromptSpec,
    SampleResult,
    SamplingSpec,
    SaveCheckpoint,
    TrainReport,
    TrainSampleSpec,
)

Progress = Callable[[dict[str, Any]], None]


async def train(cfg: RunConfig, progress: Progress = lambda row: None) -> list[dict[str, Any]]:
    """Run `cfg.iterations` iterations of GRPO; one metrics row per iteration."""
    if cfg.model:  # a typed error naming the folder or field before anything starts
        read_folder(cfg.model)
    model_dir = task_model_dir(cfg)
    task = get_task(cfg.task, model_dir=model_dir)
    check_prompt_lengths(task, cfg.generator.model.max_context - 1)  # room for one token
    check_sinks(cfg.report_to)  # a tracker not installed fails now, not after the warm start
    check_episode_budget(task, cfg.max_new_tokens)
    model_path = warm_model(cfg, task, progress)
    out = Path(cfg.out_dir)
    save_run_config(cfg, out)  # what `seer run --resume <out>` continues from
    rows: list[dict[str, Any]] = []
    selector = make_selector(cfg)
    async with contextlib.AsyncExitStack() as stack:
        tracker = stack.enter_context(run_tracker(cfg))
        rollout = await stack.enter_async_context(
            Rollout(
                rl_topology(cfg, model_path, task),
                mode=cfg.mode,
                launcher_options=launcher_options(cfg),
            )
        )
        first = 0
        if cfg.resume:  # the trainer restores weights, optimiser, RNG and publishes them
            report = await load_on_every_rank(rollout, cfg.trainer_ranks, cfg.resume)
            first = report.iteration + 1
            keep_rows_before(out, first)  # resumed in its own folder: those run again
        curriculum = make_curriculum(cfg, task, Path(cfg.resume) if cfg.resume else None)
        held_out = task.sample_prompts(cfg.eval_prompts, np.random.default_rng([cfg.seed, 10**9]))
        eval_before = None  # (mean reward, success rate, mean turns)
        if cfg.eval_prompts:
            eval_before = await evaluate_held_out(rollout, task, held_out, cfg)
            tracker.log_row(
                held_out_row(eval_before), step=first
            )  # the held-out score after `first` iterations
        for it in range(first, cfg.iterations):
            rng = np.random.default_rng([cfg.seed, it])  # resumable: a function of (seed, it)
            prompts = draw_prompts(task, curriculum, cfg.prompts_per_iteration, rng)
            ids = unique_ids(prompts)
            stream = None  # direct dispatch: the scheduler scores and sends to the ranks
            if cfg.trainer_ranks > 1 and cfg.dispatch == "direct":
                stream = stream_spec(
                    task, ids, prompts, iteration=it, num_ranks=cfg.trainer_ranks,
                    group_size=cfg.group_size, step_credit=cfg.step_credit, spec=cfg.task,
                    model_dir=model_dir or "",
                )  # fmt: skip
            start = time.perf_counter()
            result = await rollout.generate_with_record(
                prompt_specs(task, ids, prompts),
                cfg.group_size,
                sampling(cfg, it, task),
                policy=cfg.policy,
                stream=stream,
                episode=episode_spec(task),
            )
            rollout_s = time.perf_counter() - start
            if result.stream is None:
                scored, rewards, num_reward_errors = score(
                    task, prompts, result.groups, cfg.step_credit
                )
                samples, num_errors = trainable(scored, result.groups)
            else:  # scored where they finished; the samples are on the ranks already
                rewards, samples = streamed_rewards(result), ()
                num_errors = result.stream.num_dropped
                num_reward_errors = result.stream.num_reward_errors
            if curriculum is not None:
                per_prompt = np.asarray(rewards).reshape(len(prompts), cfg.group_size)
                curriculum.update(prompts, per_prompt.mean(axis=1).tolist())
            start = time.perf_counter()
            reports: list[TrainReport] = []
            if result.stream is not None:  # every rank learns its layout, then one DDP step
                reports = await train_streamed(
                    rollout, result.stream, iteration=it, sampling=sampling(cfg, it, task),
                )  # fmt: skip
                report = reports[0]
            elif cfg.trainer_ranks > 1:  # the driver sends each sample to its rank
                reports = await train_across_ranks(
                    rollout, cfg.trainer_ranks, cfg.group_size, iteration=it, scored=scored,
                    groups=result.groups, sampling=sampling(cfg, it, task),
                )  # fmt: skip
                report = reports[0]
            else:
                report = await send_train_step(rollout, it, samples, sampling(cfg, it, task))
            metrics = result.metrics()
            row = {
                "iteration": it,
                "reward_mean": float(np.mean(rewards)),
                "success_rate": success_rate(task, rewards, result.groups),
                "rollout_s": rollout_s,
                "train_s": time.perf_counter() - start,
                **rollout_figures(metrics),
                "weight_version": report.version,
                "num_error_samples": num_errors,
                "num_reward_errors": num_reward_errors,
                "policy": cfg.policy or "context_aware",
                # |predicted - true group max| / true, at each request's first dispatch
                "estimate_error": metrics["estimate_error"],
                **episode_metrics(result.groups),
                **{f"train_{k}": v for k, v in report.stats.items()},
            }
            if cfg.trainer_ranks > 1:
                row["dispatch"] = cfg.dispatch
                row["samples_per_rank"] = [int(r.stats["num_local_samples"]) for r in reports]
                # identical weights on every rank give the same sum
                row["weights_sum_per_rank"] = [r.stats.get("weights_sum") for r in reports]
            if curriculum is not None:
                row["curriculum_success"] = curriculum.state()["success"]
            if cfg.eval_prompts and (
                it + 1 == cfg.iterations or (cfg.eval_every and (it + 1) % cfg.eval_every == 0)
            ):
                row.update(held_out_row(await evaluate_held_out(rollout, task, held_out, cfg)))
                if eval_before is not None:
                    row.update(held_out_row(eval_before, "_before"))
            if selector is not None:  # Earl: the layout of the next rollout
                row["layout"] = current_layout(cfg).name
                contexts = context_lens(prompts, result)  # an episode's: its whole trajectory
                selector.observe(contexts)
                row["mean_context_len"] = float(np.mean(contexts))
                row["average_context_len"] = selector.average_context_len
                layout = selector.decide()
                if layout is not None:
                    rollout, cfg, row["layout_switch_s"] = await switch_layout(
                        stack, rollout, cfg, layout, model_path, it, report.version
                    )
                row["num_layout_switches"] = selector.num_switches
            rows.append(row)
            with (out / "metrics.jsonl").open("a") as f:
                f.write(json.dumps(row) + "\n")
            tracker.log_row(row)
            if is_sample_iteration(cfg, it):
                table = sample_rows(
                    task, prompts, result.groups, rewards, iteration=it,
                    num_rows=cfg.num_logged_samples,
                )  # fmt: skip
                tracker.log_table(it + 1, SAMPLE_TABLE, SAMPLE_COLUMNS, table)
            result.save(out / "last-rollout")
            if cfg.checkpoint_every and (it + 1) % cfg.checkpoint_every == 0:
                make_room(out, cfg.keep_checkpoints)
                await rollout.call_actor(
                    "trainer", SaveCheckpoint(path=str(out / "checkpoint"), iteration=it)
                )
                if curriculum is not None:
                    state = json.dumps(curriculum.state())
                    (out / "checkpoint" / CURRICULUM_FILE).write_text(state)
            progress(row)
    return rows


CURRICULUM_FILE = "curriculum.json"


def context_lens(prompts: list[TaskPrompt], result: Any) -> list[int]:
    """Every sample's context length as the trainer sees it (`prompt_ids` + `completion_ids`
    of its `TrainSampleSpec`): the prompt and the sample's `token_ids`, which for a
    multi-turn episode are its whole trajectory (the reset's observation, every action and
    the observations between them: `episode_sample`), so the selector follows the context
    an episode grows to, not one turn's. A streamed rollout's lengths come with its summary
    (its samples carry no tokens)."""
    lens = result.stream.output_lens if result.stream is not None else None
    return [len(p.token_ids) + (len(s.token_ids) if lens is None else lens.get(s.request_id, 0))
            for p, g in zip(prompts, result.groups, strict=True) for s in g.samples]  # fmt: skip


def streamed_rewards(result: RolloutResult) -> list[float]:
    """The rewards the scheduler computed, in `score`'s order (prompt, then sample index)."""
    assert result.stream is not None
    got = result.stream.rewards
    missing = [s.request_id for g in result.groups for s in g.samples if s.request_id not in got]
    if missing:
        raise RolloutError(f"{len(missing)} streamed samples came back unscored: {missing[:3]}")
    return [got[s.request_id] for g in result.groups for s in g.samples]


def make_curriculum(cfg: RunConfig, task: Task, resume: Path | None) -> Curriculum | None:
    """The prompt curriculum, for a task that grades its prompts (restored on resume)."""
    difficulty = getattr(task, "difficulty", None)
    if not cfg.curriculum or difficulty is None:
        return None
    curriculum = Curriculum(difficulty, pool_factor=cfg.curriculum_pool)
    saved = resume / CURRICULUM_FILE if resume is not None else None
    if saved is not None and saved.exists():
        curriculum.load(json.loads(saved.read_text()))
    return curriculum


def draw_prompts(
    task: Task, curriculum: Curriculum | None, n: int, rng: np.random.Generator
) -> list[TaskPrompt]:
    if curriculum is None:
        return task.sample_prompts(n, rng)
    return curriculum.select(task.sample_prompts(n * curriculum.pool_factor, rng), n, rng)


async def evaluate_held_out(
    rollout: Rollout, task: Task, prompts: list[TaskPrompt], cfg: RunConfig
) -> tuple[float, float, float | None]:
    """Mean reward, success rate and (a multi-turn task) mean turns on fixed held-out
    prompts with fixed sampling seeds: the learning curve without the noise of each
    iteration's fresh prompts (with partial credit reward and success differ)."""
    specs = prompt_specs(task, unique_ids(prompts), prompts)
    spec = dataclasses.replace(sampling(cfg, 0, task), seed=cfg.seed + 7)
    groups = await rollout.generate(
        specs, cfg.eval_samples, spec, policy=cfg.policy, episode=episode_spec(task)
    )
    rewards = score(task, prompts, groups)[1]
    turns = episode_metrics(groups).get("mean_turns")
    return float(np.mean(rewards)), success_rate(task, rewards, groups), turns


def held_out_row(evaluation: tuple[float, float, float | None], suffix: str = "") -> dict[str, Any]:
    """A held-out evaluation's metrics-row entries (`eval_reward`, `eval_success`, and for a
    multi-turn task `eval_mean_turns`), each name ending in `suffix`."""
    reward, success, turns = evaluation
    row: dict[str, Any] = {f"eval_reward{suffix}": reward, f"eval_success{suffix}": success}
    if turns is not None:
        row[f"eval_mean_turns{suffix}"] = turns
    return row


def prompt_specs(task: Task, ids: list[str], prompts: list[TaskPrompt]) -> list[PromptSpec]:
    """The rollout's prompts; a multi-turn task's carry their `meta` to the environment's
    `reset` (`env_info`)."""
    multi = episode_spec(task) is not None
    return [
        PromptSpec(prompt_id=pid, token_ids=p.token_ids, env_info=dict(p.meta) if multi else {})
        for pid, p in zip(ids, prompts, strict=True)
    ]


def success_rate(task: Task, rewards: list[float], groups: list[Group]) -> float:
    """The share of samples that succeeded: reward 1, or for an episode the task's
    `success(episode)` when it has one."""
    judge = getattr(task, "success", None)
    episodes = [s.episode for g in groups for s in g.samples]
    hits = [
        bool(judge(e)) if e is not None and judge is not None else r >= 1.0
        for r, e in zip(rewards, episodes, strict=True)
    ]
    return float(np.mean(hits))


def episode_metrics(groups: list[Group]) -> dict[str, Any]:
    """A multi-turn rollout's `mean_turns`, `max_turns_taken` and `episode_ends` (how many
    episodes ended for each reason); empty for a single-turn one."""
    episodes = [s.episode for g in groups for s in g.samples if s.episode is not None]
    if not episodes:
        return {}
    turns = [e.num_turns for e in episodes]
    ends: dict[str, int] = {}
    for e in episodes:
        ends[e.end_reason] = ends.get(e.end_reason, 0) + 1
    return {
        "mean_turns": float(np.mean(turns)),
        "max_turns_taken": int(max(turns)),
        "episode_ends": dict(sorted(ends.items())),
    }


def unique_ids(prompts: list[TaskPrompt]) -> list[str]:
    """Prompt ids, made unique within a batch (a prompt drawn twice gets `#1`, `#2`...)."""
    seen: dict[str, int] = {}
    out = []
    for p in prompts:
        k = seen.get(p.prompt_id, 0)
        seen[p.prompt_id] = k + 1
        out.append(p.prompt_id if k == 0 else f"{p.prompt_id}#{k}")
    return out


def sampling(cfg: RunConfig, iteration: int, task: Task) -> SamplingSpec:
    return SamplingSpec(
        temperature=cfg.temperature,
        seed=cfg.seed * 100_003 + iteration,
        max_new_tokens=cfg.max_new_tokens,
        stop_token_ids=stop_token_ids(task),
    )


def trainable(
    samples: tuple[TrainSampleSpec, ...], groups: list[Group]
) -> tuple[tuple[TrainSampleSpec, ...], int]:
    """The samples to train on (in `score`'s order): a sample that ended in "error" (the
    engine refused it, or the scheduler refused its result) is not a draw from the policy,
    so it is dropped from the batch; returns the kept samples and how many were dropped."""
    finished = [s.finish_reason for g in groups for s in g.samples]
    kept = tuple(s for s, why in zip(samples, finished, strict=True) if why != "error")
    return kept, len(samples) - len(kept)


def episode_sample(prompt_ids: tuple[int, ...], s: SampleResult) -> TrainSampleSpec:
    """A multi-turn sample in the trainer's format: its environment's reward, its mask."""
    assert s.episode is not None
    return TrainSampleSpec(
        prompt_ids=prompt_ids,
        completion_ids=s.token_ids,
        old_logprobs=s.logprobs,
        reward=s.episode.reward,
        group_id=s.group_id,
        weight_versions=s.weight_versions,
        loss_mask=s.episode.loss_mask,
    )


def score(
    task: Task, prompts: list[TaskPrompt], groups: list[Group], credit: bool = False
) -> tuple[tuple[TrainSampleSpec, ...], list[float], int]:
    """Every sample with its verifier reward, in the trainer's format, and how many rewards
    failed (scored 0: `safe_reward`). A multi-turn episode's reward is its environment's
    (`EpisodeResult.reward`) and its loss mask keeps the observation tokens out of training."""
    samples, rewards, num_failed = [], [], 0
    for prompt, group in zip(prompts, groups, strict=True):
        for s in group.samples:
            if s.episode is not None:
                samples.append(episode_sample(prompt.token_ids, s))
                rewards.append(s.episode.reward)
                continue
            reward, failed = safe_reward(task, prompt, s.token_ids)
            num_failed += failed
            rewards.append(reward)
            samples.append(
                TrainSampleSpec(
                    prompt_ids=prompt.token_ids,
                    completion_ids=s.token_ids,
                    old_logprobs=s.logprobs,
                    reward=reward,
                    group_id=s.group_id,
                    weight_versions=s.weight_versions,
                    error_index=(
                        first_error_index(task, prompt, s.token_ids, reward) if credit else -1
                    ),
                )
            )
    return tuple(samples), rewards, num_failed

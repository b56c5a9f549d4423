"""The cases of `seer bench faults` that are not a signal to a `seer run` process.

Each runs the real actors as processes over ZeroMQ and reports, like the signal cases of
`pipeline.bench.faults`: `outcome` ("continues", "fails fast: <error>"), `samples_lost`
(samples asked for that did not come back whole; None when the run does not go on) and
`detect_s` (from the fault to the first sign that the pipeline noticed it).

- `aborted_chunk`: every second chunk result of each generator ends in "abort" after half
  of its tokens (an SGLang server's `/abort_request`; `pipeline.bench.faulty`'s
  `AbortingGenerator`). Detected: the scheduler's `chunk_requeued` of that request after
  the generator's `fault_injected` (the worst such delay).
- `dropped_result`: the first chunk result of each generator is lost on the wire
  (`DroppingGenerator`); the scheduler requeues it at its deadline (`DEADLINE_FLOOR_S`
  here: the default floor `chunk_deadline_floor_s` is 120 s). Detected: as above.
- `default_weights`: generator 1 fails every chunk as an SGLang server restarted by its
  supervisor with its default weights does (`BrokenGenerator`: no tokens, a weight-version
  error). Detected: the scheduler's `generator_lost` after the first failed chunk.
- `optimiser_step`: a real trainer process gets a step whose second mini-batch has a
  non-finite loss after the first one's optimiser step ran. Detected: the `TrainStepError`
  reply, from the call; the weights (checkpointed before and after) must be unchanged and
  the trainer must train the next step at the old version.
- `netns`: a whole `seer run` (countdown, two iterations, tcp + CURVE, two trainer ranks)
  across four network-namespace hosts (`pipeline.bench.netns.rl_across_hosts`); host b's
  generator is SIGKILLed in iteration 1's rollout. Detected: the scheduler's
  `generator_lost`. Root and iproute2 only (else reported as not run, saying why).
- `real_size`: a rollout whose results are above the old 16 MiB header limit (part 1 of
  issue 34: 700 samples x 2,048 tokens; full: 512 x 8,192) through the real splitter,
  estimator and scheduler on `InstantGenerator`s; no fault: it must come back whole.
"""

from __future__ import annotations

import hashlib
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio

from pipeline.bench.logevents import events, timestamp
from pipeline.bench.netns import RL_HOSTS, Subnet, netns_trouble, rl_across_hosts, run_toml
from pipeline.config import ActorGroup, PipelineConfig, Topology, TransportConfig
from pipeline.launch import Cluster, launch_local
from pipeline.rollout import Rollout, rollout_config
from transport.errors import RemoteError
from transport.messages import (
    ActorStats,
    GetStats,
    PromptSpec,
    SamplingSpec,
    SaveCheckpoint,
    TrainReport,
    TrainSampleSpec,
    TrainStep,
)

DEADLINE_FLOOR_S = 2.0
FAULTY = "pipeline.bench.faulty:"
STANDIN = "pipeline.bench.standin:InstantGenerator"
CASES = {  # name -> how the fault is made (the table's "signal" column)
    "aborted_chunk": "stand-in: every 2nd result aborted",
    "dropped_result": "stand-in: 1st result of each dropped",
    "default_weights": "stand-in: generator 1 fails every chunk",
    "optimiser_step": "non-finite loss in mini-batch 2",
    "real_size": "none (700 x 2,048 tokens; full: 512 x 8,192)",
    "netns": "SIGKILL, generator on host b of 4",
}


def _rollout_config(folder: Path, kind: str, chunk_size: int, **scheduler: Any) -> PipelineConfig:
    cfg = rollout_config(
        num_generators=2,
        chunk_size=chunk_size,
        generator_kind=kind,
        run_dir=str(folder),
        scheduler=scheduler,
        generator={"kv_budget_tokens": 1 << 24},
    )
    return PipelineConfig(
        topology=cfg.topology,
        transport=TransportConfig(run_dir=str(folder)),
        run_id=cfg.run_id,
        ready_timeout_s=300.0,  # actor start-up on a loaded machine
    )


async def _rollout(
    config: PipelineConfig, num_prompts: int, group: int, max_new: int
) -> tuple[dict[str, Any], dict[tuple[str, int], Path | None], dict[str, float]]:
    """Roll out; (what came back, each actor's log, the scheduler's counters)."""
    prompts = [
        PromptSpec(prompt_id=f"p{i}", token_ids=(1, i % 50 + 1, 7)) for i in range(num_prompts)
    ]
    sampling = SamplingSpec(max_new_tokens=max_new, seed=0)
    async with Rollout(config) as rollout:
        cluster = rollout.cluster
        assert cluster is not None
        start = time.monotonic()
        groups = await rollout.generate(prompts, group, sampling)
        took = time.monotonic() - start
        stats = await cluster.call("scheduler", 0, GetStats(), timeout=30)
        assert isinstance(stats, ActorStats)
        logs = {key: status.log_path for key, status in cluster.status.items()}
    samples = [s for g in groups for s in g.samples]
    whole = sum(
        s.finish_reason == "length" and len(s.token_ids) == len(s.logprobs) == max_new
        for s in samples
    )
    result = {
        "samples_lost": num_prompts * group - whole,
        "rollout_s": round(took, 3),
        "num_tokens": sum(len(s.token_ids) for s in samples),
    }
    return result, logs, dict(stats.counters)


def _worst_delay(
    logs: dict[tuple[str, int], Path | None], reaction: str, per_request: bool
) -> float | None:
    """Seconds from each injected fault to the scheduler's first `reaction` after it (of
    the same request when `per_request`, else any): the worst; None when none reacted."""
    injected = [
        e
        for key, path in logs.items()
        if key[0] == "generator"
        for e in events(path, "fault_injected")
    ]
    reactions = events(logs.get(("scheduler", 0)), reaction)
    if not injected:
        return None
    if not per_request:
        first = min(timestamp(e) for e in injected)
        later = [timestamp(r) - first for r in reactions if timestamp(r) >= first - 0.01]
        return round(min(later), 3) if later else None
    delays = []
    for e in injected:
        after = [
            timestamp(r) - timestamp(e)
            for r in reactions
            if r.get("request") == e.get("request") and timestamp(r) >= timestamp(e) - 0.01
        ]
        if not after:
            return None  # a fault nobody noticed
        delays.append(min(after))
    return round(max(delays), 3)


# name -> (stand-in, scheduler options, the scheduler's reaction, matched by request)
CHUNK_FAULTS: dict[str, tuple[str, dict[str, float], str, bool]] = {
    # a sample may meet several aborts in a row: every second chunk is aborted
    "aborted_chunk": ("AbortingGenerator", {"max_chunk_faults": 20}, "chunk_requeued", True),
    "dropped_result": (
        "DroppingGenerator",
        {"chunk_deadline_floor_s": DEADLINE_FLOOR_S},
        "chunk_requeued",
        True,
    ),
    "default_weights": ("BrokenGenerator", {}, "generator_lost", False),
}


async def chunk_fault(name: str, folder: Path, quick: bool) -> dict[str, Any]:
    """`aborted_chunk`, `dropped_result` or `default_weights` on a rollout of stand-ins."""
    kind, scheduler, reaction, per_request = CHUNK_FAULTS[name]
    config = _rollout_config(folder / name, FAULTY + kind, chunk_size=4, **scheduler)
    num_prompts = 8 if quick else 32
    result, logs, counters = await _rollout(config, num_prompts, 2, max_new=16)
    return {
        "outcome": "continues",
        **result,
        "detect_s": _worst_delay(logs, reaction, per_request),
        "failed_chunks": int(counters.get("failed_chunks", 0)),
        "generators_lost": len(events(logs.get(("scheduler", 0)), "generator_lost")),
    }


async def real_size(folder: Path, quick: bool) -> dict[str, Any]:
    """A rollout of 700 x 2,048 tokens (quick) or 512 x 8,192 through the real control
    plane on stand-in generators: it must come back whole."""
    prompts, group, max_new, chunk = (175, 4, 2048, 1024) if quick else (64, 8, 8192, 2048)
    config = _rollout_config(folder / "real_size", STANDIN, chunk_size=chunk)
    result, _, _ = await _rollout(config, prompts, group, max_new)
    mib = result["num_tokens"] * 8 / 2**20  # int32 ids + float32 logprobs
    return {
        "outcome": "continues",
        **result,
        "detect_s": None,  # no fault to notice
        "samples": prompts * group,
        "tokens_per_sample": max_new,
        "results_mib": round(mib, 1),
    }


NETNS_MODEL = {
    "hidden": 32, "num_layers": 1, "num_heads": 2, "num_kv_heads": 1, "intermediate": 64,
    "max_context": 256,
}  # fmt: skip


async def netns(folder: Path, quick: bool) -> dict[str, Any]:
    prompts, group = (4, 4) if quick else (8, 4)
    not_run: dict[str, Any] = {"samples_lost": None, "detect_s": None}
    trouble = netns_trouble()
    if trouble:
        return {"outcome": f"not run: {trouble}", **not_run}
    net = Subnet(hosts=RL_HOSTS)
    try:
        net.up()
    except subprocess.CalledProcessError as exc:
        net.close()
        return {"outcome": f"not run: {exc.stderr.decode().strip()}", **not_run}
    where = folder / "netns"
    where.mkdir(parents=True, exist_ok=True)
    try:
        toml = run_toml(net, where, "countdown-partial", NETNS_MODEL, prompts, group)
        run = await rl_across_hosts(net, where, toml, timeout_s=540.0)
    except Exception as exc:  # reported, as any case that fails
        return {"outcome": f"fails: {type(exc).__name__}", "error": str(exc)[:200], **not_run}
    finally:
        net.close()
    trained = sum(sum(r.get("samples_per_rank", [])) for r in run.rows)
    expected = run.cfg.iterations * prompts * group
    return {
        "outcome": "continues" if len(run.rows) == run.cfg.iterations else "stops early",
        "samples_lost": expected - trained,
        "detect_s": run.detect_s,
        "killed": run.killed,
        "num_error_samples": sum(r.get("num_error_samples", 0) for r in run.rows),
        "samples_per_rank": [r.get("samples_per_rank") for r in run.rows],
    }


# --- a failing optimiser step -------------------------------------------------------------

TRAINER_MODEL = {
    "vocab_size": 32, "hidden": 32, "num_layers": 1, "num_heads": 2, "num_kv_heads": 1,
    "intermediate": 64, "max_context": 64, "seed": 4,
}  # fmt: skip
PROMPT = (1, 2, 3)
COMPLETIONS = ((5, 6, 7), (9, 10), (11, 12, 13), (14, 15))


def own_logprob_group(
    model: dict[str, Any], version: int, rewards: tuple[float, ...], bad: int = -1
) -> tuple[TrainSampleSpec, ...]:
    """One group (`PROMPT`, `COMPLETIONS`) on the starting model's own log-probabilities;
    sample `bad` gets an absurd (finite) one, whose importance ratio overflows: a
    non-finite loss in whichever mini-batch holds it."""
    import torch

    from actors.model import build_model
    from actors.model.options import ModelOptions

    net = build_model(ModelOptions(**model))
    out = []
    for i, (comp, reward) in enumerate(zip(COMPLETIONS, rewards, strict=True)):
        with torch.no_grad():
            logits = net(torch.tensor([PROMPT + comp[:-1]]))[0, len(PROMPT) - 1 :]  # (C, V)
            lp = torch.log_softmax(logits, -1).gather(-1, torch.tensor(comp)[:, None])[:, 0]
        logprobs = tuple(lp.tolist()) if i != bad else (-1e30,) * len(comp)
        out.append(
            TrainSampleSpec(
                prompt_ids=PROMPT,
                completion_ids=comp,
                old_logprobs=logprobs,
                reward=reward,
                group_id="g",
                weight_versions=(version,),
            )
        )
    return tuple(out)


def failing_batch(seed: int = 0) -> tuple[int, tuple[float, ...]]:
    """(the sample to poison, rewards): with the trainer's `seed` and mini-batches of two,
    the poisoned sample is the last of the second mini-batch, after the first's update."""
    import torch

    order = torch.randperm(4, generator=torch.Generator().manual_seed(seed))
    bad = int(order[3])
    return bad, tuple(0.0 if i in (bad, int(order[0])) else 1.0 for i in range(4))


def _digest(path: Path) -> str:
    return hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()


async def optimiser_step(folder: Path, quick: bool) -> dict[str, Any]:
    options = {"model": TRAINER_MODEL, "micro_batch_size": 2, "mini_batch_size": 2, "seed": 0}
    group = ActorGroup(role="trainer", kind="trainer", options=options)
    config = PipelineConfig(
        topology=Topology(actors=(group,)),
        transport=TransportConfig(run_dir=str(folder / "optimiser_step")),
        ready_timeout_s=300.0,
    )
    bad, rewards = failing_batch()
    poisoned = own_logprob_group(TRAINER_MODEL, 0, rewards, bad=bad)
    out: dict[str, Any] = {"samples_lost": None}  # the step's samples: the caller's to redo
    async with launch_local(config) as cluster:
        before, after = folder / "optimiser_step" / "before", folder / "optimiser_step" / "after"
        await _save(cluster, before)
        start = time.monotonic()
        try:
            await cluster.call("trainer", 0, TrainStep(iteration=0, samples=poisoned))
            error = ""
        except RemoteError as exc:
            error = exc.kind
        out["detect_s"] = round(time.monotonic() - start, 3)
        await _save(cluster, after)
        good = await cluster.call(
            "trainer",
            0,
            TrainStep(iteration=0, samples=own_logprob_group(TRAINER_MODEL, 0, rewards)),
        )
    out["weights_unchanged"] = _digest(before) == _digest(after)
    out["next_step_version"] = good.version if isinstance(good, TrainReport) else None
    ok = error and out["weights_unchanged"] and out["next_step_version"] == 1
    out["outcome"] = f"fails fast: {error or 'no error'}" + (", trains on" if ok else "")
    out["error"] = error
    return out


async def _save(cluster: Cluster, path: Path) -> None:
    await cluster.call("trainer", 0, SaveCheckpoint(path=str(path), iteration=0), timeout=120)


def measure_case(name: str, folder: Path, quick: bool) -> dict[str, Any]:
    """One case of `CASES`: its result (see the module's docstring)."""
    folder.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any]
    try:
        if name == "optimiser_step":
            result = anyio.run(optimiser_step, folder, quick)
        elif name == "netns":
            result = anyio.run(netns, folder, quick)
        elif name == "real_size":
            result = anyio.run(real_size, folder, quick)
        else:
            result = anyio.run(chunk_fault, name, folder, quick)
    except Exception as exc:  # the case's run failed: say how, and go on to the next
        error = type(exc).__name__
        result = {"outcome": f"fails: {error}", "error": error, "detail": str(exc)[:300]}
        result.update(samples_lost=None, detect_s=None)
    return {"signal": CASES[name], **result}

"""`seer bench faults`: what survives what, measured on real `seer run` processes.

A short `seer run` (countdown with partial credit, a tiny model warm-started for 40 steps,
2 generators, a checkpoint after every iteration, no held-out evaluation; `--quick`: 2
iterations of 4 prompts x 4 samples of up to 48 tokens, 20 warm-start steps) runs once
undisturbed: the reference. Then, one run per fault, the same run with one actor process
hit mid-iteration (as soon as the scheduler logs the start of iteration 1's rollout):
SIGKILL of the splitter, the estimator, the scheduler, generator 1, the draft store or the
trainer, and generator 1 frozen with SIGSTOP for `FREEZE_S` then resumed with SIGCONT.

Per fault (JSON `{"faults": {name: {...}}, "fuzz": {...}}`):
- `outcome`: "continues" (every iteration finished), "fails fast" (the run exited with an
  error: `error` names its type) or "stalls" (no progress `STALL_S` after the fault: the
  bench kills it); a run that failed or stalled is then resumed (`seer run --resume` from
  its last checkpoint) and, when every iteration after the checkpoint gives the
  reference's results (`COMPARED` keys: rewards and token counts exactly, losses to
  `TOLERANCE`), the outcome is "resumes from checkpoint";
- `samples_lost`: samples the reference trained on that this run did not (iterations x
  prompts x group minus the samples its trainer took), for a run that continues;
- `detect_s`: from the signal to the first sign that the run noticed: the scheduler's
  `generator_lost` log event, or, for a run that failed, the driver starting to stop the
  actors (their first `actor_stopped` log event; the run exits a little later); None when
  nothing noticed (a best-effort peer whose loss costs nothing, or a stall).

The other cases (`pipeline.bench.fault_cases.CASES`: an aborted chunk, a dropped chunk
result, a server back with default weights, a failing optimiser step, a rollout at real
size) run the real actors on a rollout or a trainer of their own and report the same keys;
the undisturbed `seer run` is made only when a signal case is asked for.

`fuzz`: frames and actor crashes from `pipeline.bench.fuzz.fuzz_actors` when that module
exists (the fuzzing work of issue 15); otherwise reported as not run.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import tomli_w
from rich.console import Console

from pipeline.bench.fault_cases import CASES, measure_case
from pipeline.records.report import results_table, write_results

FREEZE_S = 8.0
STALL_S = 60.0
RUN_TIMEOUT_S = 600.0
TOLERANCE = 1e-5  # losses and grad norms: float noise between processes
COMPARED = (
    "iteration",
    "reward_mean",
    "output_tokens",
    "weight_version",
    "train_num_samples",
    "train_num_tokens",
    "train_loss",
    "train_grad_norm",
)


@dataclass(frozen=True)
class Fault:
    role: str
    index: int
    freeze: bool = False  # SIGSTOP, then SIGCONT after FREEZE_S (else SIGKILL)


FAULTS: dict[str, Fault] = {
    "splitter": Fault("splitter", 0),
    "estimator": Fault("estimator", 0),
    "scheduler": Fault("scheduler", 0),
    "generator": Fault("generator", 1),
    "drafts": Fault("drafts", 0),
    "trainer": Fault("trainer", 0),
    "generator_sigstop": Fault("generator", 1, freeze=True),
}


def run_config(quick: bool) -> dict[str, Any]:
    """The short `seer run` (a `RunConfig` table); `quick`: the smallest run that still has
    chunks in flight when the fault hits and an iteration after the checkpoint to resume."""
    return {
        "task": "countdown-partial",  # partial credit: rewards differ within groups early
        "iterations": 2 if quick else 4,  # the fault hits iteration 1
        "prompts_per_iteration": 4 if quick else 8,
        "group_size": 4,
        "max_new_tokens": 48 if quick else 64,
        "chunk_size": 16,
        "num_generators": 2,
        # a few seconds: enough for rewards that differ in a group
        "warm_start_steps": 20 if quick else 40,
        "eval_prompts": 0,
        "checkpoint_every": 1,
        "curriculum": False,
        "ready_timeout_s": 300.0,  # actor start-up on a loaded machine
        "trainer": {"mini_batch_size": 32},
        "generator": {
            "max_batch": 16,
            "max_prefill_tokens": 512,
            "kv_budget_tokens": 8192,
            "model": {
                "hidden": 64,
                "num_layers": 2,
                "num_heads": 4,
                "num_kv_heads": 2,
                "intermediate": 128,
                "max_context": 256,
            },
        },
    }


@functools.cache
def _log_folder(config: Path) -> Path:
    """The logs folder of the topology saved at `config` (its `log_dir`, else beside it)."""
    log_dir = tomllib.loads(config.read_text()).get("log_dir", "")
    return Path(log_dir) if log_dir else config.parent / "logs"


class SeerRun:
    """One `seer run` subprocess, its actor processes and its outputs."""

    def __init__(self, folder: Path, config: Path, resume: Path | None = None) -> None:
        self.out = folder / "out"
        self.log = folder / "seer-run.log"
        cmd = [sys.executable, "-m", "pipeline.cli", "run", "--config", str(config)]
        cmd += ["--out", str(self.out)]
        if resume is not None:
            cmd += ["--resume", str(resume)]
        folder.mkdir(parents=True, exist_ok=True)
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)

    def rows(self) -> list[dict[str, Any]]:
        path = self.out / "metrics.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def actors(self) -> dict[tuple[str, int], tuple[int, Path]]:
        """(role, index) -> (pid, that topology's logs folder) of this run's actors."""
        out = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid != self.proc.pid or "actor" not in argv or "--role" not in argv:
                continue
            role = argv[argv.index("--role") + 1]
            index = int(argv[argv.index("--index") + 1])
            config = Path(argv[argv.index("--config") + 1])
            out[(role, index)] = (int(entry.name), _log_folder(config))
        return out

    def wait(self, timeout: float, progress_timeout: float | None = None) -> str:
        """ "done", "failed" or "stalled" (no new metrics row for `progress_timeout`)."""
        deadline = time.monotonic() + timeout
        last, since = len(self.rows()), time.monotonic()
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None:
                return "done" if code == 0 else "failed"
            rows = len(self.rows())
            if rows != last:
                last, since = rows, time.monotonic()
            elif progress_timeout is not None and time.monotonic() - since > progress_timeout:
                break
            time.sleep(0.05)
        self.kill()
        return "stalled"

    def error(self) -> str:
        """The exception type that ended the run (`seer: error: <type>: ...`, the line a
        runtime error ends with; else a traceback's last line)."""
        lines = [ln for ln in self.log.read_text(errors="replace").splitlines() if ln.strip()]
        for line in reversed(lines):
            if match := re.match(r"seer: error: (\w+): ", line):
                return match.group(1)
        for line in reversed(lines):
            head = line.split(":", 1)[0].strip()
            name = head.rsplit(".", 1)[-1]
            if re.fullmatch(r"[\w.]+", head) and name[:1].isupper() and ":" in line:
                return name
        return lines[-1][:120] if lines else ""

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)


def _log_events(logs: Path, name: str, event: str) -> list[dict[str, Any]]:
    path = logs / name
    if not path.exists():
        return []
    out = []
    for line in path.read_text(errors="replace").splitlines():
        if event in line:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def _timestamp(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(event["timestamp"])).timestamp()


def _hit_mid_iteration(run: SeerRun, fault: Fault, deadline: float) -> tuple[float, Path]:
    """Wait for iteration 1's rollout to start, then signal the actor; (when, logs)."""
    while time.monotonic() < deadline:
        actors = run.actors()
        if ("scheduler", 0) in actors and (fault.role, fault.index) in actors:
            logs = actors[("scheduler", 0)][1]
            started = _log_events(logs, "scheduler-0.log", "rollout_started")
            if any(e.get("rollout") == "r1" for e in started):
                pid = actors[(fault.role, fault.index)][0]
                time.sleep(0.05)  # into the rollout: chunks in flight
                os.kill(pid, signal.SIGSTOP if fault.freeze else signal.SIGKILL)
                hit = time.time()
                if fault.freeze:
                    time.sleep(FREEZE_S)
                    os.kill(pid, signal.SIGCONT)
                return hit, logs
        if run.proc.poll() is not None:
            break
        time.sleep(0.02)
    raise RuntimeError(f"the run never reached iteration 1 (see {run.log})")


def _same_results(rows: list[dict[str, Any]], reference: list[dict[str, Any]]) -> bool:
    """Every row equals the reference's row of the same iteration: counts and rewards
    exactly (the same samples), losses to float tolerance (torch's reductions differ in
    the last bits between two processes even for the same batch)."""
    by_iteration = {r["iteration"]: r for r in reference}
    return bool(rows) and all(
        _close(r.get(k), by_iteration.get(r["iteration"], {}).get(k))
        for r in rows
        for k in COMPARED
    )


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and a != b:
        return math.isclose(a, b, rel_tol=TOLERANCE, abs_tol=TOLERANCE)
    return bool(a == b)


def _first_stop(logs: Path, after: float) -> float | None:
    """When the driver began stopping the actors (their `actor_stopped` events)."""
    times = [
        _timestamp(e)
        for path in logs.glob("*.log")
        for e in _log_events(logs, path.name, "actor_stopped")
    ]
    later = [t for t in times if t >= after]
    return min(later) if later else None


def measure(
    name: str, fault: Fault, folder: Path, config: Path, reference: list[dict[str, Any]]
) -> dict[str, Any]:
    run = SeerRun(folder / name, config)
    try:
        hit, logs = _hit_mid_iteration(run, fault, time.monotonic() + RUN_TIMEOUT_S)
        state = run.wait(RUN_TIMEOUT_S, progress_timeout=STALL_S)
    finally:
        run.kill()
    ended = time.time()
    lost_events = _log_events(logs, "scheduler-0.log", "generator_lost")
    rows = run.rows()
    result: dict[str, Any] = {"signal": "SIGSTOP+SIGCONT" if fault.freeze else "SIGKILL"}
    if state == "done":
        expected = sum(r["train_num_samples"] for r in reference)
        result["outcome"] = "continues"
        result["samples_lost"] = int(expected - sum(r.get("train_num_samples", 0) for r in rows))
        result["results_match_reference"] = _same_results(rows, reference)
        after = [_timestamp(e) - hit for e in lost_events if _timestamp(e) >= hit - 0.5]
        result["detect_s"] = round(min(after), 3) if after else None
        return result
    result["outcome"] = "fails fast" if state == "failed" else "stalls"
    result["error"] = run.error() if state == "failed" else ""
    stopped = _first_stop(logs, hit) if state == "failed" else None
    noticed = stopped if stopped is not None else ended
    result["detect_s"] = round(noticed - hit, 3) if state == "failed" else None
    result["samples_lost"] = None  # the run stopped; what it had not trained, resume redoes
    checkpoint = run.out / "checkpoint"
    if checkpoint.exists():
        resumed = SeerRun(folder / f"{name}-resumed", config, resume=checkpoint)
        resumed_state = resumed.wait(RUN_TIMEOUT_S)
        rows_after = resumed.rows()
        result["resumed_iterations"] = [r["iteration"] for r in rows_after]
        result["resume_identical"] = resumed_state == "done" and _same_results(
            rows_after, reference
        )
        if result["resume_identical"]:
            result["outcome"] = f"{result['outcome']}, resumes from checkpoint"
    return result


def fuzz_summary(frames_per_actor: int) -> dict[str, Any]:
    """`pipeline.bench.fuzz.fuzz_actors`: malformed frames at every actor kind's inbox."""
    if frames_per_actor == 0:
        return {"frames": None, "actor_crashes": None, "note": "not run (0 frames asked)"}
    try:
        from pipeline.bench.fuzz import fuzz_actors
    except ImportError:
        return {"frames": None, "actor_crashes": None, "note": "not run: no fuzz_actors here"}
    out: dict[str, Any] = fuzz_actors(frames_per_actor)
    keys = ("frames", "actor_crashes", "error_replies", "missing_replies", "outputs_match")
    return {k: out.get(k) for k in keys}


def run(
    json_path: str | None = None,
    quick: bool = False,
    faults: tuple[str, ...] | None = None,
    fuzz_frames: int | None = None,
    folder: str | None = None,
) -> dict[str, Any]:
    console = Console(width=140)
    names = faults or (*FAULTS, *CASES)
    unknown = [n for n in names if n not in FAULTS and n not in CASES]
    if unknown:
        raise ValueError(f"unknown faults {unknown}; choose from {sorted([*FAULTS, *CASES])}")
    base = Path(folder or f"runs/bench-faults-{time.strftime('%Y%m%d-%H%M%S')}")
    base.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {
        "faults": {},
        "run": run_config(quick),
        "quick": quick,
        "freeze_s": FREEZE_S,
        "stall_s": STALL_S,
        "cpus": os.cpu_count(),
        "loadavg_before": list(os.getloadavg()),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    start = time.monotonic()
    reference: list[dict[str, Any]] = []
    config = base / "run.toml"
    if any(n in FAULTS for n in names):
        config.write_text(tomli_w.dumps({**run_config(quick), "cache_dir": str(base / "cache")}))
        with console.status("reference run (no fault)"):
            ref = SeerRun(base / "reference", config)
            if ref.wait(RUN_TIMEOUT_S) != "done":
                raise RuntimeError(f"the reference run failed; see {ref.log}")
        reference = ref.rows()
    for name in names:
        if name in FAULTS:
            with console.status(f"{name}: {FAULTS[name].role} hit mid-iteration"):
                summary["faults"][name] = measure(name, FAULTS[name], base, config, reference)
        else:
            with console.status(f"{name}: {CASES[name]}"):
                summary["faults"][name] = measure_case(name, base / "cases", quick)
    summary["seconds"] = round(time.monotonic() - start, 1)
    summary["loadavg_after"] = list(os.getloadavg())
    with console.status("fuzz"):
        frames = fuzz_frames if fuzz_frames is not None else (200 if quick else 2000)
        summary["fuzz"] = fuzz_summary(frames)
    rows = [
        (
            name,
            r["signal"],
            r["outcome"],
            "-" if r["samples_lost"] is None else str(r["samples_lost"]),
            "-" if r["detect_s"] is None else f"{r['detect_s']:.2f}",
            r.get("error", ""),
        )
        for name, r in summary["faults"].items()
    ]
    columns = ("fault", "signal", "outcome", "samples lost", "detect s", "error")
    cfg = summary["run"]
    title = (
        f"seer bench faults: signal cases on {cfg['iterations']} iterations x "
        f"{cfg['prompts_per_iteration']} prompts x {cfg['group_size']}"
    )
    console.print(results_table(title, columns, rows, justify="left"))
    console.print(f"fuzz: {summary['fuzz']}")
    if json_path:
        write_results(json_path, summary)
        console.print(f"wrote {json_path}")
    return summary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`seer bench faults`'s own flags (beside --json and --quick)."""
    parser.add_argument("--faults", help="comma-separated subset (default: all)")


def run_args(args: argparse.Namespace) -> None:
    """`seer bench faults` from its parsed flags."""
    faults = tuple(args.faults.split(",")) if args.faults else None
    run(args.json, quick=args.quick, faults=faults)

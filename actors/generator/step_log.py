"""StepLog: a generator's engine steps as they ran live, for the simulator's validation.

Enabled by the environment variable ``SEER_STEP_LOG=<folder>`` (diagnostic, like
``SEER_PROFILE``; the launcher passes the environment to every actor). Per engine step the
generator keeps one row: when its loop iteration began and the engine call began and ended
(wall clock, ``time.time()``, the clock chunk records use) and the worker thread's CPU time
inside the call, the decoding rows, their cached context tokens (in all, and the longest
row's), the prefill and draft tokens, the chunks it finished, and how long it had waited
for work (nothing queued) since the previous step. On ``EndRollout``
the rows since the last one are appended to ``<folder>/steps-gen<index>.jsonl`` as one
line ``{"rollout_id", "instance", "steps": [[...], ...]}`` (columns: ``COLUMNS``). A
generator whose speculation policy prices drafts by the engine's T(B, g) (measured at its
start-up) also writes what that policy will read, ``<folder>/step-times-gen<index>.json``:
``{"instance", "rows": [[B, g, seconds], ...]}`` for every batch size up to its largest and
every draft length up to ``g_max`` (``write_step_times``), so that a replay's policy prices
drafts exactly as the live one did.

What it measures that an in-process profile cannot: the step time with both generator
processes and the control plane sharing the cores, and the time the actor spends between
engine calls (thread hand-off, reporting chunks, admitting new ones).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from actors.generator.engine import StepResult

__all__ = ["COLUMNS", "ENV", "StepLog", "read_step_logs", "read_step_times"]

ENV = "SEER_STEP_LOG"
COLUMNS = (
    "loop_s",  # the actor's loop iteration began (admitting queued chunks)
    "start_s",  # the engine call began (in the worker thread)
    "end_s",  # the engine call returned (in the worker thread)
    "num_decode_rows",
    "num_decode_context_tokens",
    "num_prefill_tokens",
    "num_draft_tokens",
    "num_finished",
    "num_prefill_requests",
    "idle_s",  # the loop waited for work (none queued) since the previous step
    "cpu_s",  # CPU time of the worker thread inside the engine call (time.thread_time)
    "num_decode_max_context",  # the longest decoding row's cached tokens
    "num_draft_max",  # the largest decoding row's draft nodes
)


class StepLog:
    def __init__(self, folder: Path, instance: int) -> None:
        self.path = folder / f"steps-gen{instance}.jsonl"
        self.instance = instance
        self.rows: list[tuple[float, ...]] = []

    @classmethod
    def from_env(cls, instance: int) -> StepLog | None:
        folder = os.environ.get(ENV)
        if not folder:
            return None
        Path(folder).mkdir(parents=True, exist_ok=True)
        return cls(Path(folder), instance)

    def add(
        self,
        loop_s: float,
        start_s: float,
        end_s: float,
        cpu_s: float,
        result: StepResult,
        idle_s: float,
    ) -> None:
        self.rows.append(
            (
                loop_s,
                start_s,
                end_s,
                result.num_decode_rows,
                result.num_decode_context_tokens,
                result.num_prefill_tokens,
                result.num_draft_tokens,
                len(result.finished),
                result.num_prefill_requests,
                idle_s,
                cpu_s,
                result.num_decode_max_context,
                result.num_draft_max,
            )
        )

    def write_step_times(self, rows: list[tuple[int, int, float]]) -> None:
        """The T(B, g) the generator's speculation policy prices drafts by: (B, g, seconds)."""
        path = self.path.with_name(f"step-times-gen{self.instance}.json")
        path.write_text(json.dumps({"instance": self.instance, "rows": rows}))

    def flush(self, rollout_id: str) -> None:
        rows, self.rows = self.rows, []
        line = {"rollout_id": rollout_id, "instance": self.instance, "steps": rows}
        with self.path.open("a") as f:
            f.write(json.dumps(line) + "\n")


def read_step_logs(folder: Path) -> dict[str, dict[int, list[dict[str, float]]]]:
    """rollout id -> instance -> its steps (one dict per step, keys ``COLUMNS``)."""
    out: dict[str, dict[int, list[dict[str, float]]]] = {}
    for path in sorted(folder.glob("steps-gen*.jsonl")):
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            # a log from before a column was added lacks the last ones
            steps = [dict(zip(COLUMNS, row, strict=False)) for row in entry["steps"]]
            per = out.setdefault(entry["rollout_id"], {})
            per.setdefault(int(entry["instance"]), []).extend(steps)
    return out


def read_step_times(folder: Path) -> dict[int, list[tuple[int, int, float]]]:
    """instance -> the (B, g, seconds) rows its speculation policy priced drafts by (none
    for a generator that wrote none: no adaptive speculation, or a log from before)."""
    out: dict[int, list[tuple[int, int, float]]] = {}
    for path in sorted(folder.glob("step-times-gen*.json")):
        entry = json.loads(path.read_text())
        out[int(entry["instance"])] = [(int(b), int(g), float(t)) for b, g, t in entry["rows"]]
    return out

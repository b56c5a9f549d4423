"""Speculator: what a generator does around each engine step to speculate.

Before a step, `drafts(decoding_ids)` asks the draft client for each decoding request's
best nodes (chains, or top-k multi-path trees in the tail), lets the policy split the
step's budget among them, and returns `Draft`s for `engine.step`. After the step,
`observe(result, decoding_ids)` feeds the new tokens to the client (local replica, matcher,
appends for the store) and measures acceptance per draft position for the policy and per
chunk for the rollout metrics (`SpecStats`). With mode "off" it drafts nothing but still
counts verify steps, so acceptance length reads 1.0.

It also measures: every decode step's seconds, from the start of its drafting work to the
end of `observe` (the engine step and everything speculation adds around it), go to the
policy with the step's tokens (`policy.observe_step`), so the budget weighs what drafted
steps really cost and return (``actors.drafts.measured``). A step that prefilled is not
measured (its time is not the decode's). The simulator passes the cost model's seconds
instead of the clock's. With mode "off" nothing is measured (no policy runs).

While the policy says drafts cannot pay at the running batch size (its class is off, or
the step also prefills where drafted steps have not shown a gain) the speculator does no
drafting work: no tree lookups. After `RECENT_STEPS` steps without drafting the budget's
own grant (explorations and probes do not count; ``drafted_lately`` False) its
`DraftSync` goes quiet: it pushes and checks the store is alive only now and then, and
new groups do not wake it. A step that looks drafts up after such a pause calls
``on_resume`` first (the sync pulls, at most once per `CATCH_UP_INTERVALS`: the replicas
catch up on what siblings appended meanwhile; this generator's own tokens were kept and
are flushed then).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from actors.drafts.client import DraftClient
from actors.drafts.options import SpecConfig
from actors.drafts.policy import Candidate, SpecPolicy, StepTime, make_draft_policy
from actors.drafts.source import DraftSource
from actors.generator.engine import Draft, StepResult
from transport.messages import SpecStats

RECENT_STEPS = 16  # steps without the budget's own grant after which the draft sync slows down


@dataclass
class _ChunkStats:
    is_probe: bool
    num_steps: int = 0
    num_tokens: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0


class Speculator:
    """Drafts from `source` (by default, unless mode is "off", a `DraftClient` of the
    config's mode: the live replicas; the simulator passes its `ReplayClient`)."""

    def __init__(
        self,
        config: SpecConfig,
        step_time: StepTime,
        *,
        padded: bool = False,
        source: DraftSource | None = None,
    ) -> None:
        self.config = config
        if source is None and config.mode != "off":
            source = DraftClient(
                config.mode, max_depth=config.tree_depth, max_match=config.max_match
            )
        self.client: DraftSource | None = source
        self.policy: SpecPolicy = make_draft_policy(config, step_time, padded=padded)
        self.chunks: dict[str, _ChunkStats] = {}
        self._drafted: dict[str, tuple[Draft, list[float]]] = {}  # this step's, with probs
        self.totals = {
            "num_steps": 0,
            "num_tokens": 0,
            "num_draft_tokens": 0,
            "num_accepted_tokens": 0,
        }
        self._skip: dict[int, int] = {}  # batch size -> steps to skip drafting
        # steps since the last one that drafted the budget's own grant (0 until the first
        # step decides, so that a fresh generator's first groups are pulled at once)
        self.steps_off = 0
        self._backoff: dict[int, int] = {}
        self._step_start: float | None = None  # when the current step's drafting began
        self.on_resume: Callable[[], None] | None = None  # drafting turned back on (a sync)
        self.num_resumes = 0

    def start(
        self,
        request_id: str,
        group_id: str,
        chunk_seq: int,
        prompt_ids: Sequence[int],
        generated_ids: Sequence[int],
        is_probe: bool,
        *,
        fresh: int = 0,
    ) -> bool:
        """Track a chunk (`DraftSource.start`, plus whether it is a probe); True when its
        group is new to this generator's draft replicas."""
        self.chunks[request_id] = _ChunkStats(is_probe)
        if self.client is None:
            return False
        return self.client.start(
            request_id, group_id, chunk_seq, prompt_ids, generated_ids, fresh=fresh
        )

    def end(self, request_id: str) -> SpecStats:
        if self.client is not None:
            self.client.end(request_id)
        s = self.chunks.pop(request_id, None) or _ChunkStats(False)
        return SpecStats(
            num_steps=s.num_steps,
            num_tokens=s.num_tokens,
            num_draft_tokens=s.num_draft_tokens,
            num_accepted_tokens=s.num_accepted_tokens,
        )

    def forget(self, request_ids: Sequence[str]) -> None:
        """A rollout ended: drop the replicas of these requests' groups."""
        if self.client is not None:
            self.client.forget(request_ids)

    def drafts(self, decoding_ids: Sequence[str], *, prefill: bool = False) -> dict[str, Draft]:
        """``prefill``: the step will also prefill (admit or continue a prompt); then it
        drafts only where the policy's measured drafted steps say drafts pay
        (``drafts_with_prefill``)."""
        self._step_start = time.perf_counter()
        self._drafted = {}
        client = self.client
        if client is None or not decoding_ids:
            return {}
        batch = len(decoding_ids)
        # ``is_drafting``: this step drafts the budget's own grant (an exploration or a probe
        # does not count: measured on the CPU, a class predicted to pay that granted
        # nothing, or an exploration, kept the store's sync at full rate, its messages
        # costing the generators more than the explorations); a step that looks drafts up
        # after `RECENT_STEPS` without asks the sync to catch the replicas up first
        # (`on_resume`; the sync does so at most once per slow interval)
        pays = self.policy.can_pay(batch)
        if prefill and not self.policy.drafts_with_prefill(batch):
            pays = False
        skip = self._skip.get(batch, 0)
        if pays and skip > 0:  # drafts did not pay at this batch size lately: no work
            self._skip[batch] = skip - 1
            pays = False
        if not pays:
            self.steps_off += 1
            return {}
        if not self.drafted_lately:
            self.num_resumes += 1
            if self.on_resume is not None:
                self.on_resume()
        paths, max_nodes = self.policy.paths(batch), self.policy.max_nodes(batch)
        specs = {}
        candidates = []
        for rid in decoding_ids:
            res = client.speculate(
                rid, max_tokens=max_nodes, top_k_paths=paths, min_prob=self.config.min_prob
            )
            if res is None or not res.token_ids:
                continue
            specs[rid] = res
            stats = self.chunks.get(rid)
            candidates.append(Candidate(rid, stats is not None and stats.is_probe, res.probs))
        grant = self.policy.allocate(batch, candidates)
        self.steps_off = 0 if grant and self.policy.granted else self.steps_off + 1
        # back off exponentially (up to 16 steps, the policy's exploration interval) while
        # the policy keeps granting nothing
        self._backoff[batch] = min(2 * self._backoff.get(batch, 1), 16) if not grant else 1
        self._skip[batch] = 0 if grant else self._backoff[batch]
        out = {}
        for rid, n in grant.items():
            res = specs[rid]
            out[rid] = draft = Draft(tuple(res.token_ids[:n]), tuple(res.parents[:n]))
            self._drafted[rid] = (draft, [float(p) for p in res.probs[:n]])
        return out

    def observe(
        self,
        result: StepResult,
        decoding_ids: Sequence[str],
        seconds: float | None = None,
        plain_seconds: float | None = None,
    ) -> None:
        """After the step: tokens to the draft source, acceptance to the policy, and the
        step's measured cost (``seconds``: the simulator's, with ``plain_seconds``, what
        the step would have cost without drafts; None: the clock's since ``drafts``)."""
        decoding = set(decoding_ids)
        client, drafted = self.client, self._drafted
        steps = tokens = 0
        for delta in result.deltas:
            rid = delta.request_id
            if client is not None:
                client.extend(rid, delta.token_ids)
            stats = self.chunks.get(rid)
            if stats is None or rid not in decoding:
                continue  # a prefill step's first token is not a verify step
            n = len(delta.token_ids)
            stats.num_steps += 1
            stats.num_tokens += n
            steps += 1
            tokens += n
            if rid in drafted:
                draft, probs = drafted[rid]
                accepted = delta.num_accepted_tokens
                stats.num_draft_tokens += len(draft)
                stats.num_accepted_tokens += accepted
                self.totals["num_draft_tokens"] += len(draft)
                self.totals["num_accepted_tokens"] += accepted
                depths, node_ok = node_outcomes(draft, delta.token_ids[:accepted])
                self.policy.observe(max(depths, default=0), accepted, probs, node_ok)
        self.totals["num_steps"] += steps
        self.totals["num_tokens"] += tokens
        start, self._step_start = self._step_start, None
        if seconds is None and start is not None:
            seconds = time.perf_counter() - start
        if not decoding or client is None:
            return  # mode "off": no policy to tell
        measurable = steps == len(decoding) and not result.num_prefill_tokens
        if seconds is None or not measurable:
            seconds = 0.0  # nothing measured; the policy forgets the step's grant
        self.policy.observe_step(len(decoding), tokens, seconds, plain_seconds=plain_seconds)

    @property
    def is_drafting(self) -> bool:
        """Whether the last step drafted the budget's own grant."""
        return self.steps_off == 0

    @property
    def drafted_lately(self) -> bool:
        """Whether one of the last `RECENT_STEPS` steps drafted the budget's own grant: the
        draft sync runs at full rate, and lookups after longer call ``on_resume``. (Per
        step, drafting flips with the batch size and with steps that also prefill; a
        catch-up pull of every running group at each flip cost more than drafts saved.)"""
        return self.steps_off < RECENT_STEPS

    @property
    def mean_accept_len(self) -> float:
        t = self.totals
        return t["num_tokens"] / t["num_steps"] if t["num_steps"] else 0.0


def node_outcomes(draft: Draft, accepted_ids: Sequence[int]) -> tuple[list[int], list[bool]]:
    """Each draft node's depth and whether it lies on the accepted path (the accepted
    tokens, bonus token excluded)."""
    depths: list[int] = []
    ok: list[bool] = []
    for tok, par in zip(draft.token_ids, draft.parents, strict=True):
        d = 1 if par < 0 else depths[par] + 1
        depths.append(d)
        ok.append((par < 0 or ok[par]) and d <= len(accepted_ids) and accepted_ids[d - 1] == tok)
    return depths, ok

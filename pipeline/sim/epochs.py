"""`seer sim seer --epochs E`: Seer's workloads over epochs, with history-aware policies.

The same prompts recur every epoch (``pipeline.sim.workload.epoch_requests``: each prompt
keeps its length scale, its samples' lengths recur with RhymeRL's rank churn, lengths drift
upward). Per workload and epoch, policies on 32 simulated H200 instances:

- ``baseline``, ``divided``, ``context_aware`` (Seer's estimate: the longest finished
  sibling), ``oracle``: as ``seer sim seer``;
- ``context_aware_prior``: context-aware fed by one live ``LengthEstimator`` with
  ``use_prior`` that lives through the epochs (each prompt's longest output when its group
  last closed; ``prior_rule="floor"``), ranked with the live default long band
  (``SchedulerOptions.long_band``: groups estimated within a factor of it of the
  generation limit share the top rank, FIFO among them);
- ``seer``: context-aware + grouped speculation (MBA) on the sibling acceptance table;
- ``seer_history``: ``context_aware_prior`` (its band too) + grouped speculation whose
  trees also hold the previous epoch's responses to the prompt: the acceptance table
  measured through the live ``DraftStore`` with ``keep_history``
  (``measure_history_acceptance``: RhymeRL's 93% token recurrence); in epoch 1 there is
  no history and it drafts as ``seer``.
Study variants (``STUDY``): ``ca_prior_strict`` (the prior with Seer's strict
longest-first order, no band), ``ca_band`` (the band without the prior),
``ca_prior_until_finished`` (the prior dropped when the first sibling finishes),
``ca_extrapolated`` (epoch 1's best estimator without history,
``pipeline.sim.estimators``), ``ca_prior_probe_unless_prior``, ``ca_prior_probe_unknown``
and ``ca_prior_probe_never`` (``context_aware_prior`` with ``ContextAware``'s
``probe_first`` rule of that name, ``PROBE_FIRST_STUDY``: a probe goes first unless its
group has a prior, only while its group has no estimate, or never) and
``ca_group_max_known`` (``pipeline.sim.gap``'s ``TrueGroupMax``: every group's true
longest known from the start, the ceiling). In
epoch 1 the prior policies without the band have nothing to remember: they are reported
as their twins' runs (``same_run_as``), and their estimators learn the priors from the
epoch's lengths; those with the band run (their order differs).
Everything is simulated and deterministic.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from actors.estimator.core import LengthEstimator
from actors.scheduler.options import SchedulerOptions
from pipeline.records.metrics import compute_metrics
from pipeline.records.report import results_table, write_results
from pipeline.sim.acceptance import (
    RHYME_TOKEN_RECURRENCE,
    AcceptanceTable,
    measure_acceptance,
    measure_history_acceptance,
)
from pipeline.sim.costmodel import CostModel
from pipeline.sim.estimators import ExtrapolatingEstimator
from pipeline.sim.gap import TrueGroupMax
from pipeline.sim.simulator import SimConfig, SimRequest, simulate
from pipeline.sim.workload import SEER_WORKLOADS, EpochModel, epoch_requests, rank_churn

__all__ = [
    "BANDED",
    "EPOCH_POLICIES",
    "PROBE_FIRST_STUDY",
    "RHYME_PUBLISHED",
    "STUDY",
    "run",
    "run_workload",
]

# policy -> (scheduler policy, speculation, KV pool, estimator kind)
EPOCH_POLICIES: dict[str, tuple[str, str, str, str]] = {
    "baseline": ("baseline", "off", "local", "fresh"),
    "divided": ("divided", "off", "global", "fresh"),
    "context_aware": ("context_aware", "off", "global", "fresh"),
    "context_aware_prior": ("context_aware", "off", "global", "prior"),
    "seer": ("context_aware", "group", "global", "fresh"),
    "seer_history": ("context_aware", "group", "global", "prior"),
    "oracle": ("oracle", "off", "global", "fresh"),
}
STUDY: dict[str, tuple[str, str, str, str]] = {
    "ca_prior_strict": ("context_aware", "off", "global", "prior"),
    "ca_band": ("context_aware", "off", "global", "fresh"),
    "ca_prior_until_finished": ("context_aware", "off", "global", "prior_until_finished"),
    "ca_extrapolated": ("context_aware", "off", "global", "extrapolated"),
    "ca_prior_probe_unless_prior": ("context_aware", "off", "global", "prior"),
    "ca_prior_probe_unknown": ("context_aware", "off", "global", "prior"),
    "ca_prior_probe_never": ("context_aware", "off", "global", "prior"),
    # the ceiling of any group estimate: L[g] = the group's true longest from the start
    "ca_group_max_known": ("context_aware", "off", "global", "known"),
}
# the policies ranked with the live default long band and probe rule (the others: Seer's
# strict order, probes always first), but for PROBE_FIRST_STUDY's own probe rules
BANDED = (
    "context_aware_prior",
    "seer_history",
    "ca_band",
    "ca_prior_probe_unless_prior",
    "ca_prior_probe_unknown",
    "ca_prior_probe_never",
)
PROBE_FIRST_STUDY = {
    "ca_prior_probe_unless_prior": "unless_prior",
    "ca_prior_probe_unknown": "unknown",
    "ca_prior_probe_never": "never",
}
# in epoch 1 (no priors, no history) these runs are their twin's, run again: the twin's
# result is reported, and the estimator learns its priors from the epoch's true lengths
# (what the run would have fed it)
_TWIN_IN_EPOCH_1 = {
    "ca_prior_strict": "context_aware",
    "ca_prior_until_finished": "context_aware",
}
# RhymeRL (REFERENCES.md; arXiv 2508.18588): speed-ups over veRL
RHYME_PUBLISHED = {"histopipe": 1.43, "two_tier": 1.56, "with_histospec": 2.34, "best": 2.61}


def _estimators(limit: int) -> dict[str, Callable[[], LengthEstimator]]:
    """Per estimator kind, how a policy's estimator is made (the prior kinds are made once
    and live through the epochs; the others are made fresh every epoch)."""
    return {
        "fresh": lambda: LengthEstimator(limit),
        "prior": lambda: LengthEstimator(limit, use_prior=True, prior_rule="floor"),
        "prior_until_finished": lambda: LengthEstimator(
            limit, use_prior=True, prior_rule="until_finished"
        ),
        "extrapolated": lambda: ExtrapolatingEstimator(limit),
        "known": lambda: LengthEstimator(limit),
    }


def run_workload(
    name: str,
    *,
    epochs: int = 2,
    policies: tuple[str, ...] = tuple(EPOCH_POLICIES),
    model: EpochModel | None = None,
    num_instances: int = 32,
    chunk_size: int = 4096,
    max_batch: int = 256,
    scale: float = 1.0,
    seed: int = 0,
    long_band: float | None = None,
    console: Console | None = None,
) -> dict[str, Any]:
    """Every policy on every epoch of workload ``name``: the JSON's per-workload entry.
    ``long_band``: the ``BANDED`` policies' (None: the live default,
    ``SchedulerOptions.long_band``)."""
    table = {**EPOCH_POLICIES, **STUDY}
    unknown = [p for p in policies if p not in table]
    if unknown:
        raise ValueError(f"unknown policy {unknown[0]!r}; valid: {', '.join(table)}")
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    m = model or EpochModel()
    w = SEER_WORKLOADS[name]
    cost = CostModel.builtin(w.shape)
    plain = measure_acceptance()
    with_history = measure_history_acceptance(history=w.group_size)
    makers = _estimators(w.max_output)
    band = SchedulerOptions().long_band if long_band is None else long_band
    probe_first = SchedulerOptions().probe_first
    kept: dict[str, LengthEstimator] = {}  # the prior policies' estimators, across epochs
    out: list[dict[str, Any]] = []
    before: list[SimRequest] | None = None
    for epoch in range(1, epochs + 1):
        reqs = epoch_requests(w, epoch, model=m, seed=seed, scale=scale)
        results: dict[str, Any] = {}
        for pol in policies:
            sched, spec, pool, kind = table[pol]
            if kind.startswith("prior"):
                estimator = kept.setdefault(pol, makers[kind]())
            else:
                estimator = makers[kind]()
            twin = _TWIN_IN_EPOCH_1.get(pol)
            if epoch == 1 and twin in results:
                _learn(estimator, reqs)
                results[pol] = {**results[twin], "same_run_as": twin}
                continue
            acceptance: AcceptanceTable = plain
            if pol == "seer_history" and epoch > 1:
                acceptance = with_history
            cfg = SimConfig(
                num_instances=num_instances,
                max_batch=max_batch,
                kv_capacity=w.kv_capacity,
                chunk_size=chunk_size,
                kv_pool=pool,  # type: ignore[arg-type]
                spec=spec,  # type: ignore[arg-type]
                seed=seed,
                long_band=band if pol in BANDED else 1.0,
                probe_first=PROBE_FIRST_STUDY.get(pol, probe_first if pol in BANDED else "always"),
            )
            policy = _known(reqs, w.max_output, cfg) if kind == "known" else None
            res = simulate(
                reqs,
                sched,
                cfg,
                cost,
                acceptance=acceptance,
                estimator=estimator,
                policy_object=policy,
            )
            mt = compute_metrics(res.record)
            results[pol] = {
                "throughput_tok_s": mt["throughput_tok_s"],
                "tail_s": mt["tail_s"],
                "preemptions": mt["num_preemptions"],
                "makespan_s": mt["makespan_s"],
                "mean_accept_len": mt["mean_accept_len"],
                "estimate_error": mt["estimate_error"],
                "estimate_bias": mt["estimate_bias"],
                "sim_cpu_s": res.cpu_s,
                "long_band": cfg.long_band,
                "probe_first": cfg.probe_first,
            }
            if console:
                err = mt["estimate_error"]
                console.print(
                    f"  {name} epoch {epoch} {pol}: makespan {mt['makespan_s']:.0f} s, "
                    f"tail {mt['tail_s']:.0f} s, estimate error "
                    f"{'-' if err is None else f'{err:.2f}'} (simulated in {res.cpu_s:.1f} s CPU)"
                )
        out.append(_epoch_entry(epoch, reqs, before, results))
        before = reqs
    return {
        "epochs": out,
        "num_requests": len(before or []),
        "group_size": w.group_size,
        "history_acceptance": with_history.as_dict(),
    }


def _known(reqs: list[SimRequest], limit: int, cfg: SimConfig) -> TrueGroupMax:
    """Context-aware told every group's true longest output from the start."""
    group_max: dict[str, int] = {}
    for r in reqs:
        group_max[r.group_id] = max(group_max.get(r.group_id, 0), r.output_len)
    return TrueGroupMax(
        limit,
        group_max,
        revealed=False,
        starvation_s=cfg.starvation_s,
        starvation_every=cfg.starvation_every,
    )


def _learn(estimator: LengthEstimator, reqs: list[SimRequest]) -> None:
    """Feed ``estimator`` a rollout of ``reqs`` (every group opened, finished, closed)."""
    groups: dict[str, list[SimRequest]] = {}
    for r in reqs:
        groups.setdefault(r.group_id, []).append(r)
    for gid, members in groups.items():
        estimator.open_group(gid, members[0].prompt_id, len(members))
        for r in members:
            estimator.on_request_finished(gid, r.output_len)
        estimator.close_group(gid)


def _epoch_entry(
    epoch: int,
    reqs: list[SimRequest],
    before: list[SimRequest] | None,
    results: dict[str, Any],
) -> dict[str, Any]:
    base = results.get("baseline", {}).get("throughput_tok_s")
    best = results.get("oracle", {}).get("throughput_tok_s")
    entry: dict[str, Any] = {
        "epoch": epoch,
        "policies": results,
        "ratios": {p: v["throughput_tok_s"] / base for p, v in results.items()} if base else {},
        "of_oracle": {p: v["throughput_tok_s"] / best for p, v in results.items()} if best else {},
        "mean_output": sum(r.output_len for r in reqs) / len(reqs),
    }
    if before is not None:
        entry["rank_churn"] = rank_churn(before, reqs)
    return entry


def run(
    json_path: str | None = None,
    *,
    epochs: int = 2,
    workloads: tuple[str, ...] = ("qwen2-vl-72b", "kimi-k2"),
    policies: tuple[str, ...] = tuple(EPOCH_POLICIES),
    model: EpochModel | None = None,
    scale: float = 1.0,
    chunk_size: int = 4096,
    num_instances: int = 32,
    seed: int = 0,
    long_band: float | None = None,
) -> dict[str, Any]:
    console = Console(width=150)
    start = time.perf_counter()
    m = model or EpochModel()
    result: dict[str, Any] = {"workloads": {}}
    for name in workloads:
        if name not in SEER_WORKLOADS:
            raise ValueError(f"unknown workload {name!r}; valid: {', '.join(SEER_WORKLOADS)}")
        result["workloads"][name] = run_workload(
            name,
            epochs=epochs,
            policies=policies,
            model=m,
            num_instances=num_instances,
            chunk_size=chunk_size,
            scale=scale,
            seed=seed,
            long_band=long_band,
            console=console,
        )
    result["settings"] = {
        "epochs": epochs,
        "num_instances": num_instances,
        "chunk_size": chunk_size,
        "scale": scale,
        "seed": seed,
        "long_band": SchedulerOptions().long_band if long_band is None else long_band,
        "epoch_model": {
            "iterations_per_epoch": m.iterations_per_epoch,
            "drift_per_iteration": m.drift,
            "rank_corr": m.rank_corr,
            "sample_corr": m.sample_corr,
            "token_recurrence": RHYME_TOKEN_RECURRENCE,
        },
        "rhymerl_published": RHYME_PUBLISHED,
        "label": "simulated",
        "wall_s": time.perf_counter() - start,
    }
    console.print(_table(result))
    if json_path:
        write_results(json_path, result)
        console.print(f"wrote {json_path}")
    return result


def _table(result: dict[str, Any]) -> Table:
    cols = ("workload", "epoch", "policy", "tok/s", "vs baseline", "of oracle", "tail s", "est err")
    rows = []
    for name, w in result["workloads"].items():
        for e in w["epochs"]:
            for pol, p in e["policies"].items():
                err = p["estimate_error"]
                rows.append(
                    (
                        name,
                        str(e["epoch"]),
                        pol,
                        f"{p['throughput_tok_s']:.0f}",
                        f"{e['ratios'][pol]:.2f}x" if pol in e["ratios"] else "-",
                        f"{e['of_oracle'][pol]:.3f}" if pol in e["of_oracle"] else "-",
                        f"{p['tail_s']:.0f}",
                        "-" if err is None else f"{err:.2f}",
                    )
                )
    n = result["settings"]["num_instances"]
    title = f"seer sim seer --epochs (SIMULATED: {n} x H200 cost tables)"
    return results_table(title, cols, rows)

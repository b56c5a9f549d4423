"""A rollout simulator that runs the live policy objects on a measured cost model.

``simulate`` drives ``SchedulerCore`` (policies, placement, waiting index), the
``LengthEstimator`` and the speculation policy (MBA) against simulated generator instances
(``SimInstance``: batch slots, KV budget, the built-in engine's admission and preemption
rules) whose step time comes from a ``CostModel`` table. ``seer sim validate`` checks it
against live rollouts on this machine; ``seer sim seer`` runs Seer's ablation at Seer's
scale on the H200 tables (results labelled "simulated"); ``seer sim gap`` splits
context-aware's shortfall against the oracle into its causes.
"""

from pipeline.sim.acceptance import AcceptanceTable, SiblingModel, measure_acceptance
from pipeline.sim.costmodel import CostModel, CostModelError
from pipeline.sim.instance import Chunk, SimInstance
from pipeline.sim.simulator import SimConfig, SimRequest, SimResult, simulate

__all__ = [
    "AcceptanceTable",
    "Chunk",
    "CostModel",
    "CostModelError",
    "SiblingModel",
    "SimConfig",
    "SimInstance",
    "SimRequest",
    "SimResult",
    "measure_acceptance",
    "simulate",
]

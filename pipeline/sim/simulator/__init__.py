"""The simulator: a rollout on N simulated generator instances, driven by the live policy objects.

Consumes a workload (``SimRequest``: true output lengths, which only the simulated engine
and the oracle see; optionally a live trace's recorded output), a ``SimConfig`` and a
``CostModel``; emits a ``SimResult``: a ``RolloutRecord`` (so ``compute_metrics`` and
``plot_timeline`` work on simulated runs as on live ones) plus counters.

- ``config.py``: ``SimRequest``, ``SimConfig``, ``SimResult``;
- ``events.py``: ``simulate`` and its event loop around the live ``SchedulerCore`` and
  ``LengthEstimator``;
- ``speculation.py``: the generator's speculation policy (MBA) per instance, on the
  acceptance table or replayed on recorded output;
- ``record.py``: the per-request books and the ``RolloutRecord`` built from them.
"""

from pipeline.sim.simulator.config import SimConfig, SimRequest, SimResult
from pipeline.sim.simulator.events import simulate
from pipeline.sim.simulator.speculation import recorded_step_times

__all__ = ["SimConfig", "SimRequest", "SimResult", "recorded_step_times", "simulate"]

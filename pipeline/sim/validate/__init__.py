"""`seer sim validate`: the simulator against live rollouts on this machine.

Every policy runs live for each seed, with and without grouped drafts; each trace is then
replayed in the simulator, priced by a cost table of this machine, and the report gives,
per configuration, the simulated makespan and tail against the live ones, the noise
floor an exact simulator would show, and whether the simulator orders the configurations
as live does. How and why: docs/sim-validation-method.md.

- ``command.py``: ``run``, the command's steps in order;
- ``live.py``: the live runs and what they logged (``teacher_forced_error``);
- ``replay.py``: each trace again in the simulator (``latencies``);
- ``speeds.py``: each live generator's speed against the table, and the speed draws;
- ``stats.py``: errors, noise floors, the sign test and the resolved ranking;
- ``report.py``: the table, its caption, the JSON file.
"""

from pipeline.sim.validate.command import add_arguments, run, run_args
from pipeline.sim.validate.live import (
    QUICK_MEAN,
    SIZES,
    TEMPERATURE,
    Streams,
    teacher_forced_error,
)
from pipeline.sim.validate.live import _Block as _Block
from pipeline.sim.validate.live import _step_logs as _step_logs
from pipeline.sim.validate.replay import RANDOM_TEXT, latencies
from pipeline.sim.validate.speeds import (
    DRAWS,
    PACE_WINDOW_S,
    Pool,
    centred,
    cost_factors,
    instance_paces,
    instance_speeds,
    pool_key,
)
from pipeline.sim.validate.speeds import _at_speeds as _at_speeds
from pipeline.sim.validate.speeds import _drawn as _drawn
from pipeline.sim.validate.stats import (
    MIN_RESOLVING_SEEDS,
    RANK_ALPHA,
    noise_floor,
    sign_test,
    worst_noise_floor,
)
from pipeline.sim.validate.stats import _resolved_ranking as _resolved_ranking

__all__ = [
    "DRAWS",
    "MIN_RESOLVING_SEEDS",
    "PACE_WINDOW_S",
    "QUICK_MEAN",
    "RANDOM_TEXT",
    "RANK_ALPHA",
    "SIZES",
    "TEMPERATURE",
    "Pool",
    "Streams",
    "add_arguments",
    "centred",
    "cost_factors",
    "instance_paces",
    "instance_speeds",
    "latencies",
    "noise_floor",
    "pool_key",
    "run",
    "run_args",
    "sign_test",
    "teacher_forced_error",
    "worst_noise_floor",
]

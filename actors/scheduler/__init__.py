"""The scheduler's pure core: request books, policies, placement and dispatch decisions.

Synchronous and free of sockets and clocks, so that a cluster simulator (planned) can run
the same objects as the actor shell. See ``core`` for the dispatch contract and ``policy``
for the orderings.
"""

from actors.scheduler.core import COUNTER_NAMES, SchedulerCore, UnknownRequestError
from actors.scheduler.placement import LoadView, has_capacity, select_instance
from actors.scheduler.policy import (
    POLICY_NAMES,
    ContextAware,
    Divided,
    GroupRoundRobin,
    Oracle,
    Policy,
    make_policy,
)
from actors.scheduler.state import (
    UNBOUNDED_KV,
    Dispatch,
    InstanceLoad,
    ProjectedLoad,
    RequestState,
    RequestStatus,
)

__all__ = [
    "COUNTER_NAMES",
    "POLICY_NAMES",
    "UNBOUNDED_KV",
    "ContextAware",
    "Dispatch",
    "Divided",
    "GroupRoundRobin",
    "InstanceLoad",
    "LoadView",
    "Oracle",
    "Policy",
    "ProjectedLoad",
    "RequestState",
    "RequestStatus",
    "SchedulerCore",
    "UnknownRequestError",
    "has_capacity",
    "make_policy",
    "select_instance",
]

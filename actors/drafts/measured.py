"""What drafted steps really cost, from measured step times: the speculation budget's check
on the profile it prices drafts by.

The marginal-benefit budget (``actors.drafts.policy``) prices a drafted step by the
engine's profiled T(B, g). The profile can be wrong where it matters: it is taken once,
at one context length, on a scratch cache, with nothing else running, and drafting
itself costs time outside the engine's step (drafting from the trees, bookkeeping) that
no profile of the step sees. On a CPU a verify step's extra rows cost about what they
return, so an error of a few percent decides whether drafts pay. ``MeasuredCost``
measures instead, step by step:

- a plain step (no drafts) of B decoding rows that took s seconds gives the machine's
  speed now against the profile, s / T(B, 0) (``base``: a decayed mean), so a host that
  slows down or speeds up as a whole moves drafted and plain steps alike;
- a drafted step priced at T(B, d) that took s seconds cost s / base - T(B, 0) more than
  the plain step it replaced, where the profile said T(B, d) - T(B, 0) (at least
  ``MIN_EXTRA`` of a plain step: drafting is never free);
- ``cost_factor`` is the measured extra over the profiled extra (ratios of decayed sums
  over recent drafted steps, starting at 1), and ``price`` turns the profile into what
  the budget decides on: T(B, 0) + cost_factor * max(T(B, d) - T(B, 0), MIN_EXTRA *
  T(B, 0)). Acceptance is measured separately (the policy's calibration), so a draft's
  tokens and its cost are both measured numbers.

Measurements are what the caller passes (live: wall seconds around the engine step and
the drafting work; in the simulator: the cost model's seconds), so the same object decides
in both.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["MIN_EXTRA", "MeasuredCost"]

MIN_EXTRA = 0.01  # the least a drafted step is priced above a plain one, as a fraction
COST_FACTOR_BOUNDS = (0.25, 100.0)


class MeasuredCost:
    """Measured against profiled cost of drafted steps (see the module)."""

    def __init__(
        self,
        *,
        decay: float = 0.9,
        base_decay: float = 0.95,
        prior_steps: float = 2.0,
        prior_extra: float = 0.1,
    ) -> None:
        if not (0 < decay < 1 and 0 < base_decay < 1) or prior_steps <= 0 or prior_extra <= 0:
            raise ValueError(
                "MeasuredCost: decays must be in (0, 1), prior_steps and prior_extra > 0"
            )
        self.decay = decay
        self.base_decay = base_decay
        # plain steps: decayed sums of seconds / T(B, 0), one prior step at the profile's speed
        self._base_sum = 1.0
        self._base_n = 1.0
        # drafted steps: decayed sums of the measured and the profiled extra, as fractions of
        # a plain step; the prior: ``prior_steps`` steps whose extra was as profiled
        self._measured = prior_steps * prior_extra
        self._profiled = prior_steps * prior_extra
        self.num_plain = 0
        self.num_drafted = 0

    @property
    def base(self) -> float:
        """Plain steps' measured seconds over the profile's T(B, 0), recent ones weighing most."""
        return self._base_sum / self._base_n

    @property
    def cost_factor(self) -> float:
        """Drafted steps' measured extra time over the profile's (1: as profiled), bounded."""
        lo, hi = COST_FACTOR_BOUNDS
        return min(max(self._measured / self._profiled, lo), hi)

    def price(self, times: Sequence[float]) -> list[float]:
        """The profile's T(B, g) for g = 0, 1, ... as measured: the extra of every g >= 1
        scaled by ``cost_factor``."""
        k, t0 = self.cost_factor, times[0]
        return [t0, *(t0 + k * max(t - t0, MIN_EXTRA * t0) for t in times[1:])]

    def plain(self, seconds: float, profiled: float) -> None:
        """A step without drafts took ``seconds``; the profile said ``profiled`` (T(B, 0))."""
        if seconds <= 0 or profiled <= 0:
            return
        d = self.base_decay
        self._base_sum = self._base_sum * d + seconds / profiled
        self._base_n = self._base_n * d + 1.0
        self.num_plain += 1

    def drafted(
        self,
        tokens_per_row: float,
        seconds: float,
        profiled: float,
        profiled_drafted: float,
        plain_seconds: float | None = None,
    ) -> float:
        """A drafted step: ``tokens_per_row`` tokens per decoding row (bonus included) in
        ``seconds``, where the profile said ``profiled`` (T(B, 0)) without drafts and
        ``profiled_drafted`` with them. ``plain_seconds``: what the same step would have
        taken without drafts, where the caller knows it (the simulator); else the
        profile's at the machine's measured speed. Returns its measured speed-up over a
        plain step."""
        if seconds <= 0 or profiled <= 0:
            return 1.0
        plain_s = plain_seconds if plain_seconds else self.base * profiled
        d = self.decay
        self._measured = self._measured * d + (seconds - plain_s) / plain_s
        self._profiled = self._profiled * d + max(profiled_drafted / profiled - 1, MIN_EXTRA)
        self.num_drafted += 1
        return tokens_per_row * plain_s / seconds

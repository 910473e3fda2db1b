"""The ranges a run's limits must lie in, checked where a run is described.

A limit outside its range does not limit: a negative memory size removed the memory
limit, a NaN timeout crashed after the run's cgroup was made (and leaked it), zero
steps ended a "verified" run after one forward call. The sandbox's own specs check
these ranges before anything is created, so a library caller cannot start an
unbounded run; the command line checks the same table when it parses its options.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

# Far beyond any verification run, far below where timers and RLIMIT_CPU overflow.
MAX_TIMEOUT_S = 7 * 24 * 3600
MAX_MEMORY_MB = 1 << 24  # 16 TiB
# The smallest CPU share a CFS quota can express: 1 ms per 100 ms period.
MIN_CPUS = 0.01
MAX_SEED = 2**32 - 1  # numpy.random.seed's range; torch and random accept it too

# What a run gets when its caller names no limit: the sandbox's specs, every front door's
# options and the agents' settings read these, so a default is changed in one place.
DEFAULT_TIMEOUT_S = 300.0
DEFAULT_MEMORY_MB = 4096
DEFAULT_ISOLATION = "auto"  # the strongest backend available
DEFAULT_DEVICES = 2  # what device_count() answers, so one-rank-per-device programs spawn two
# A run on its own (``torchport run``, a library caller): enough steps to see a loss curve.
# A verification compares fewer (agents.defaults.VERIFY_STEPS): its runs happen twice per
# repair round.
RUN_STEPS = 20


@dataclass(frozen=True)
class Bound:
    """A closed range of numbers (open at ``low`` when ``above``: a timeout of 0 is none)."""

    low: int | float
    high: int | float = math.inf
    integer: bool = True
    above: bool = False

    def describe(self) -> str:
        """The range in words, for an error message or an option's help."""
        kind = "an integer" if self.integer else "a number"
        low = f"above {self.low}" if self.above else f"at least {self.low}"
        return f"{kind} {low}" + (f" and at most {self.high}" if self.high < math.inf else "")

    def holds(self, value: object) -> bool:
        """Whether ``value`` is a number of the right kind inside the range."""
        kind = numbers.Integral if self.integer else numbers.Real  # numpy's numbers too
        if isinstance(value, bool) or not isinstance(value, kind):
            return False
        number = int(value) if isinstance(value, numbers.Integral) else float(value)
        if not math.isfinite(number) or number > self.high:
            return False
        return number > self.low if self.above else number >= self.low

    def check(self, name: str, value: object, error: type[ValueError] = ValueError) -> None:
        """Raise ``error`` naming ``name`` unless ``value`` is in range."""
        if not self.holds(value):
            raise error(f"{name} must be {self.describe()}, not {value!r}")


LIMITS: dict[str, Bound] = {
    "timeout_s": Bound(0, MAX_TIMEOUT_S, integer=False, above=True),
    "memory_mb": Bound(1, MAX_MEMORY_MB),
    "pids": Bound(1),
    "cpus": Bound(MIN_CPUS, integer=False),
    "steps": Bound(1),
    "forwards": Bound(1),
    "devices": Bound(1),
    "seed": Bound(0, MAX_SEED),
}


def check_limits(error: type[ValueError] = ValueError, **values: object) -> None:
    """Check each named limit against ``LIMITS``; ``None`` means "not limited by this"
    only where the caller allows it, so pass only the values that must be numbers."""
    for name, value in values.items():
        LIMITS[name].check(name, value, error)

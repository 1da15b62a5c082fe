"""Which waiting run the engine's loop starts next: tenants take turns."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def next_run(waiting: Sequence[str], running: Mapping[str, int],
             last: Mapping[str, int]) -> int:
    """Which waiting run starts next, given the tenants of the waiting line (oldest first),
    the runs each tenant has going, and when each was last let in (a count; none: -1):
    the tenant with the fewest runs going, then the one let in least recently, then the
    oldest run. Within a tenant arrival order holds, and a tenant that sends many
    requests at once cannot hold the others back: they take turns.

    >>> next_run(["a", "a", "b"], {"a": 1}, {"a": 5})
    2
    >>> next_run(["a", "b", "a"], {}, {"a": 3, "b": 4})
    0
    >>> next_run(["a", "a", "b"], {}, {"a": 3})
    2
    """
    return min(range(len(waiting)),
               key=lambda i: (running.get(waiting[i], 0), last.get(waiting[i], -1), i))

"""Pin the control loop's thread to CPUs and ask for real-time scheduling (Linux); one line when either is refused.

Standard library only. ``apply_scheduling(cpus, priority)`` changes the calling thread and returns a
``Scheduling`` that says what it did (``notes``, one line each) and puts the thread back as it was (``restore``).
Without the permission (root, CAP_SYS_NICE or an ``rtprio`` limit in /etc/security/limits.conf) real-time
scheduling is refused by the kernel: the loop then runs on the normal scheduler and the note says so.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

__all__ = ["Scheduling", "apply_scheduling"]


@dataclass
class Scheduling:
    """What ``apply_scheduling`` changed (to undo it) and one line per request about the outcome."""

    notes: list[str] = field(default_factory=list)
    affinity: set[int] | None = None  # the thread's CPUs before pinning (None: not changed)
    policy: tuple[int, int] | None = None  # (scheduler, priority) before real-time scheduling (None: not changed)

    def restore(self) -> None:
        """Put the calling thread's CPUs and scheduler back (best effort: never raises)."""
        try:
            if self.affinity is not None:
                os.sched_setaffinity(0, self.affinity)
            if self.policy is not None:
                os.sched_setscheduler(0, self.policy[0], os.sched_param(self.policy[1]))
        except (OSError, AttributeError):
            pass
        self.affinity = self.policy = None


def apply_scheduling(cpus: list[int] | tuple[int, ...] = (), priority: int = 0) -> Scheduling:
    """Pin the calling thread to ``cpus`` (if any) and request SCHED_FIFO at ``priority`` (if > 0)."""
    result = Scheduling()
    if cpus:
        if not hasattr(os, "sched_setaffinity"):
            result.notes.append(f"cpu_affinity {list(cpus)}: this platform cannot pin a thread; running unpinned")
        else:
            try:
                before = os.sched_getaffinity(0)
                os.sched_setaffinity(0, set(cpus))
                result.affinity = before
                result.notes.append(f"control loop pinned to CPU {', '.join(map(str, sorted(cpus)))}")
            except OSError as error:
                result.notes.append(f"cpu_affinity {list(cpus)} refused ({error.strerror}); running unpinned")
    if priority:
        if not hasattr(os, "sched_setscheduler"):
            result.notes.append("realtime_priority: this platform has no SCHED_FIFO; running on the normal scheduler")
            return result
        try:
            before = (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority)
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
            result.policy = before
            result.notes.append(f"control loop on real-time scheduling (SCHED_FIFO, priority {priority})")
        except PermissionError:
            result.notes.append(
                f"real-time scheduling (SCHED_FIFO priority {priority}) needs root, CAP_SYS_NICE or an rtprio limit "
                "in /etc/security/limits.conf; running on the normal scheduler"
            )
        except OSError as error:
            result.notes.append(
                f"real-time scheduling (SCHED_FIFO priority {priority}) refused ({error.strerror}); "
                "running on the normal scheduler"
            )
    return result

"""A bound ``TermTask``'s mirror, assembled from the mirrors its terms declare (``robopt.envs.robot.mirror``).

Kept apart from ``mirror`` because it reads the term library (``library.REGISTRY``) for its error message, and the
library's terms import ``mirror`` for their declarations.
"""

from __future__ import annotations

from robopt.envs.robot.library import REGISTRY
from robopt.envs.robot.mirror import Mirror


def task_mirror(task) -> dict[str, Mirror]:
    """A ``TermTask``'s mirrors: ``action`` (the robot's joints), ``obs`` [D] and, with critic terms, ``privileged``
    [P], each term's declared mirror at the width it had when the task was bound; a one-line ValueError naming a
    term without one."""
    if task.robot.mirror is None:
        raise ValueError("symmetry needs robot.mirror (the left-right name pairs, e.g. [[FL_, FR_], [RL_, RR_]])")
    out = {"action": task.robot.mirror.joints}
    for key, section, widths in (
        ("obs", "observations", task.term_widths),
        ("privileged", "critic", getattr(task, "critic_widths", [])),
    ):
        if task.sections[section]:
            out[key] = Mirror.cat([_term_mirror(task, section, entry, width) for entry, width in
                                   zip(task.sections[section], widths, strict=True)])  # fmt: skip
    return out


def _term_mirror(task, section: str, entry, width: int) -> Mirror:
    declared = entry.info.mirror
    if declared is None:
        mirrored = sorted(name for name, info in REGISTRY[entry.kind].items() if info.mirror is not None)
        raise ValueError(
            f"task.{section}.{entry.name} has no mirror, so symmetry cannot mirror the {section}; terms with one: "
            f"{', '.join(mirrored)}"
        )
    try:
        part = declared(task, entry.params, width)
    except ValueError as error:
        raise ValueError(f"task.{section}.{entry.name}: {error}") from None
    if part.perm.numel() != width:
        raise ValueError(f"task.{section}.{entry.name}: its mirror has {part.perm.numel()} elements, not {width}")
    return part

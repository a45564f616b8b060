"""Finding, reading and compiling a robot's MJCF (or URDF), and naming its parts (``robot.mjcf`` and patterns).

Errors are one-line ValueErrors naming the config key and, for MuJoCo's own failures (a missing mesh, a bad
element), MuJoCo's message.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import mujoco

ASSETS = Path(__file__).parent / "assets"


def shipped_robots() -> list[str]:
    """The robots robopt ships (``robopt:<name>``), each a folder of ``assets`` with its MJCF and README."""
    return sorted(p.name for p in ASSETS.iterdir() if (p / f"{p.name}.xml").is_file())


def resolve_mjcf(path: str) -> Path:
    """A file path for ``robot.mjcf``: a path, ``robopt:<name>`` (shipped) or ``menagerie:<dir>/<file>``."""
    if not path:
        raise ValueError("robot.mjcf is empty: give a path, robopt:<name> or menagerie:<dir>/<file>")
    if path.startswith("robopt:"):
        name = path[len("robopt:") :]
        shipped = shipped_robots()
        if name not in shipped:
            raise ValueError(f"robot.mjcf={path!r}: no shipped robot {name!r}; shipped: {', '.join(shipped)}")
        return ASSETS / name / f"{name}.xml"
    if path.startswith("menagerie:"):
        return _menagerie(path)
    resolved = Path(path).expanduser()
    if not resolved.is_file():
        raise ValueError(f"robot.mjcf={path!r}: file not found")
    return resolved


def _menagerie(path: str) -> Path:
    relative = path[len("menagerie:") :]
    root = os.environ.get("MENAGERIE_ROOT")
    if root:
        candidate = Path(root) / relative
        if not candidate.is_file():
            raise ValueError(f"robot.mjcf={path!r}: {candidate} not found under MENAGERIE_ROOT={root}")
        return candidate
    try:
        import mujoco_menagerie  # noqa: F401  (fetches models on first use; needs the network)
    except ImportError:
        raise ValueError(
            f"robot.mjcf={path!r}: set MENAGERIE_ROOT to a local copy of mujoco_menagerie, or pip install "
            "mujoco-menagerie (it downloads each robot on first use)"
        ) from None
    from mujoco_menagerie import get_model_path  # type: ignore[attr-defined]

    try:
        return Path(get_model_path(relative))
    except Exception as error:  # noqa: BLE001  (the package's network or lookup failure: one line)
        raise ValueError(f"robot.mjcf={path!r}: mujoco-menagerie could not provide it ({error})") from None


def load_spec(path: Path) -> mujoco.MjSpec:
    """Parse an MJCF or URDF file; MuJoCo's parse error as one line."""
    try:
        return mujoco.MjSpec.from_file(str(path))
    except ValueError as error:
        raise ValueError(f"robot.mjcf={str(path)!r}: MuJoCo cannot read it: {first_line(error)}") from None


def compile_spec(spec: mujoco.MjSpec, path: Path) -> mujoco.MjModel:
    """Compile; MuJoCo's compile error (a missing mesh, a bad attribute) as one line."""
    try:
        return spec.compile()
    except ValueError as error:
        raise ValueError(f"robot.mjcf={str(path)!r}: MuJoCo cannot compile it: {first_line(error)}") from None


def first_line(error: Exception) -> str:
    text = " ".join(str(error).split())
    return text.removeprefix("Error: ")


def names_of(model: mujoco.MjModel, kind: mujoco.mjtObj, count: int) -> list[str]:
    return [mujoco.mj_id2name(model, kind, i) or "" for i in range(count)]


def match_all(key: str, patterns, names: list[str], what: str) -> dict[str, list[int]]:
    """Indices of ``names`` each regular expression fully matches; one that matches none is a ValueError."""
    matched = {}
    for pattern in patterns:
        try:
            regex = re.compile(pattern)
        except re.error as error:
            raise ValueError(f"{key}: {pattern!r} is not a regular expression ({error})") from None
        hits = [i for i, name in enumerate(names) if name and regex.fullmatch(name)]
        if not hits:
            listed = ", ".join(name for name in names if name) or "(none named)"
            plural = what[:-1] + "ies" if what.endswith("y") else what + "s"
            raise ValueError(f"{key}: {pattern!r} matches no {what}; {plural}: {listed}")
        matched[pattern] = hits
    return matched


_MOVABLE = (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE))


def movable(model: mujoco.MjModel, names: list[str]) -> list[str]:
    """Joint names with '' for the joints an actuator cannot drive alone (free, ball)."""
    return [name if int(model.jnt_type[i]) in _MOVABLE else "" for i, name in enumerate(names)]

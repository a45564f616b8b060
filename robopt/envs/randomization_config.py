"""The domain randomization config (``env.kwargs.randomization``): its knobs, checks and one-line errors.

What the knobs do to a native env is ``robopt.envs.randomization`` (``Randomizer``); this module imports neither
torch nor MuJoCo.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from numbers import Real

SCALED_PARAMS = ("body_mass", "geom_friction", "dof_damping", "actuator_gain")  # drawn in this order
MAX_DELAY = 1000  # control ticks; the ring buffer holds MAX_DELAY + 1 actions per env at most
_ALIASES = {"motor_strength": "actuator_gain"}


@dataclass(frozen=True)
class Randomization:
    """Domain randomization config (``env.kwargs.randomization``); every knob off by default.

    ``motor_strength`` is accepted by ``from_config`` as another name for ``actuator_gain``. One draw scales an
    actuator's whole force: its gain and its affine bias (``actuator_biasprm[:3]``), so a PD position servo
    (force = kp * (target - q) - kd * qdot, a robot's joint) gets kp and kd scaled together, and a plain motor
    (force = gear * gain * ctrl, the Gymnasium tasks; no bias) is scaled as before. MuJoCo clamps ctrl to its range
    before the gain: a strength above 1 still gives a stronger motor at full command.
    """

    body_mass: tuple[float, float] = (1.0, 1.0)
    """Scale range for every body mass; the body's inertia is scaled by the same draw (same shape, denser)."""
    geom_friction: tuple[float, float] = (1.0, 1.0)
    """Scale range for every geom's (sliding, torsional, rolling) friction."""
    dof_damping: tuple[float, float] = (1.0, 1.0)
    """Scale range for every joint DoF damping."""
    actuator_gain: tuple[float, float] = (1.0, 1.0)
    """Scale range for every actuator gain (motor force per unit ctrl), one per actuator; alias motor_strength."""
    action_delay: tuple[int, int] = (0, 0)
    """Actuator delay range in control ticks (env steps), one integer per env drawn at reset."""
    action_noise: float = 0.0
    """Std of Gaussian noise added to the applied action before clipping to the action bounds (action units)."""
    obs_noise: float = 0.0
    """Std of Gaussian noise added to every returned observation element (obs units)."""
    push_force: tuple[float, float] = (0.0, 0.0)
    """Push magnitude range in Newtons; each push has a fresh magnitude and horizontal direction."""
    push_interval: tuple[int, int] | None = None
    """Idle steps before each push, drawn per push (and at reset); required with push_force."""
    push_duration: int = 1
    """Steps a push lasts."""
    push_body: str | None = None
    """Body the pushes act on (at its centre of mass); default the root body (the world's first child)."""
    com_offset: tuple[float, float] = (0.0, 0.0)
    """Range (m) of an offset added to each axis of ``com_body``'s centre of mass, drawn per env at reset."""
    com_body: str | None = None
    """Body whose centre of mass ``com_offset`` moves; default the root body (the world's first child)."""

    @classmethod
    def from_config(cls, value: Randomization | dict | None) -> Randomization:
        """Build from a config mapping such as ``{"body_mass": [0.8, 1.2]}``; bad keys or values: ValueError."""
        if value is None or isinstance(value, Randomization):
            return value or cls()
        if not isinstance(value, dict):
            raise ValueError(f"randomization must be a mapping of knobs to values, got {type(value).__name__}")
        allowed = [f.name for f in fields(cls)] + list(_ALIASES)
        unknown = [key for key in value if key not in allowed]
        if unknown:
            raise ValueError(f"unknown randomization keys {unknown}; allowed: {', '.join(allowed)}")
        if all(key in value for key in ("motor_strength", "actuator_gain")):
            raise ValueError("randomization motor_strength is another name for actuator_gain; give one of them")
        parsed = {_ALIASES.get(key, key): _parse(key, bounds) for key, bounds in value.items()}
        pushing = parsed.get("push_force", (0.0, 0.0))[1] > 0
        if pushing and "push_interval" not in parsed:
            raise ValueError("randomization push_force needs push_interval: [low, high] idle steps between pushes")
        for key in ("push_interval", "push_duration", "push_body"):
            if key in parsed and not pushing:
                raise ValueError(f"randomization {key} needs push_force: [low, high] Newtons with high > 0")
        if "com_body" in parsed and parsed.get("com_offset", (0.0, 0.0)) == (0.0, 0.0):
            raise ValueError("randomization com_body needs com_offset: [low, high] metres, not [0, 0]")
        return cls(**parsed)

    @property
    def params_active(self) -> bool:
        """Whether any model-parameter range differs from (1, 1), or the centre of mass moves."""
        return any(getattr(self, name) != (1.0, 1.0) for name in SCALED_PARAMS) or self.moves_com

    @property
    def moves_com(self) -> bool:
        """Whether the centre-of-mass offset is on."""
        return self.com_offset != (0.0, 0.0)

    @property
    def pushes(self) -> bool:
        """Whether random pushes are on."""
        return self.push_force[1] > 0

    @property
    def active(self) -> bool:
        """Whether any knob is on."""
        return self.params_active or self.action_delay[1] > 0 or self.pushes or self.noisy or self.moves_com

    @property
    def noisy(self) -> bool:
        """Whether action or observation noise is on."""
        return self.action_noise > 0 or self.obs_noise > 0


def _parse(key: str, value) -> tuple | float | int | str:
    """One config value checked and converted; a one-line ValueError naming the key and what is allowed."""
    if key in (*SCALED_PARAMS, "motor_strength"):
        low, high = _pair(key, value, "0 < low <= high (scale factors)")
        if not 0.0 < low <= high:
            raise ValueError(f"randomization {key}={value!r}: need 0 < low <= high (scale factors)")
        return low, high
    if key in ("action_delay", "push_interval"):
        limit = MAX_DELAY if key == "action_delay" else math.inf
        rule = f"integers 0 <= low <= high <= {MAX_DELAY} (control ticks)"
        rule = rule if key == "action_delay" else "integers 0 <= low <= high (steps)"
        low, high = _pair(key, value, rule)
        if not (_is_integer(low) and _is_integer(high) and 0 <= low <= high <= limit):
            raise ValueError(f"randomization {key}={value!r}: need {rule}")
        return int(low), int(high)
    if key in ("action_noise", "obs_noise"):
        if not _is_number(value) or not 0.0 <= float(value) < math.inf:
            raise ValueError(f"randomization {key}={value!r}: need a standard deviation >= 0")
        return float(value)
    if key == "com_offset":
        low, high = _pair(key, value, "low <= high (metres)")
        if not low <= high:
            raise ValueError(f"randomization {key}={value!r}: need low <= high (metres)")
        return low, high
    if key == "push_force":
        low, high = _pair(key, value, "0 <= low <= high (Newtons)")
        if not 0.0 <= low <= high:
            raise ValueError(f"randomization {key}={value!r}: need 0 <= low <= high (Newtons)")
        return low, high
    if key == "push_duration":
        if not (_is_number(value) and _is_integer(float(value)) and value >= 1):
            raise ValueError(f"randomization {key}={value!r}: need an integer >= 1 (steps)")
        return int(value)
    if not isinstance(value, str) or not value:  # push_body, com_body
        raise ValueError(f"randomization {key}={value!r}: need a body name")
    return value


def _is_number(value) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def _is_integer(value: float) -> bool:
    return math.isfinite(value) and float(value).is_integer()


def _pair(key: str, value, rule: str) -> tuple[float, float]:
    if not isinstance(value, (list, tuple)) or len(value) != 2 or not all(_is_number(v) for v in value):
        raise ValueError(f"randomization {key}={value!r}: need [low, high] with {rule}")
    low, high = float(value[0]), float(value[1])
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"randomization {key}={value!r}: need finite [low, high] with {rule}")
    return low, high

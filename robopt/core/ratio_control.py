"""``RatioControl``: how a surrogate keeps the probability ratio near 1 (a name and its constants, data only).

The per-entry objective of each name and its source are in ``robopt.core.surrogates``, which applies them;
``adapt_kl_coef`` is PPO-penalty's coefficient update between updates. ``RatioControl`` nests in algorithm configs
as ``algo.ratio`` (its fields are config options).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from robopt.options import option

RATIO_CONTROLS = (
    "plain",
    "clip",
    "clip_asymmetric",
    "dual_clip",
    "kl_penalty_adaptive",
    "spo_penalty",
    "sigmoid_gate",
)
"""Names accepted by ``RatioControl.name``."""

RATIO_LEVELS = ("token", "sequence")
"""Values accepted by ``RatioControl.level``."""


def adapt_kl_coef(coef: float, measured_kl: float, target: float, factor: float = 2.0, tolerance: float = 1.5) -> float:
    """PPO-penalty coefficient update (Schulman et al. 2017, sec. 4), a pure function; the loop holds the state.

    d < target / tolerance -> coef / factor;  d > target * tolerance -> coef * factor;  otherwise unchanged.
    """
    if measured_kl < target / tolerance:
        return coef / factor
    if measured_kl > target * tolerance:
        return coef * factor
    return coef


@dataclass(frozen=True)
class RatioControl:
    """How the surrogate keeps the probability ratio near 1: a name plus the constants it uses (data only).

    Nests in algorithm configs as ``algo.ratio``; e.g. ``algo.ratio.name=spo_penalty algo.ratio.spo_eps=0.2``.
    """

    name: str = option("clip", "ratio control (see robopt.core.surrogates)", RATIO_CONTROLS)
    clip_low: float = option(0.2, "clip, dual_clip: eps; clip_asymmetric: eps_low (band starts at 1 - eps_low)")
    clip_high: float | None = option(None, "clip_asymmetric: eps_high (e.g. 0.28, DAPO); None means clip_low")
    dual_clip: float = option(3.0, "dual_clip: c > 1, floor c * A on the objective of negative-advantage entries")
    spo_eps: float = option(0.2, "spo_penalty: eps of |A| / (2 eps) (r - 1)^2; per-entry optimum at r = 1 +- eps")
    gate_temperature_pos: float = option(1.0, "sigmoid_gate: tau for A > 0 (larger decays faster away from r = 1)")
    gate_temperature_neg: float = option(1.05, "sigmoid_gate: tau for A <= 0 (SAPO uses tau_neg > tau_pos)")
    kl_coef: float = option(1.0, "kl_penalty_adaptive: initial beta; the algorithm adapts it between updates")
    kl_target: float = option(0.01, "kl_penalty_adaptive: target mean KL d_targ per update")
    level: str = option("token", "ratio per entry (token) or per row (sequence: GSPO's geometric mean)", RATIO_LEVELS)

    def __post_init__(self) -> None:
        if self.name not in RATIO_CONTROLS:
            raise ValueError(f"ratio control name={self.name!r} is unknown; allowed: {', '.join(RATIO_CONTROLS)}")
        if self.level not in RATIO_LEVELS:
            raise ValueError(f"ratio control level={self.level!r} is unknown; allowed: {', '.join(RATIO_LEVELS)}")
        if not 0.0 < self.clip_low < 1.0:
            raise ValueError(f"ratio control clip_low={self.clip_low!r}: must be in (0, 1)")
        if self.clip_high is not None and self.clip_high <= 0.0:
            raise ValueError(f"ratio control clip_high={self.clip_high!r}: must be > 0")
        if self.name == "clip" and self.clip_high is not None and self.clip_high != self.clip_low:
            raise ValueError(
                f"ratio control 'clip' is symmetric but clip_high={self.clip_high!r}; use 'clip_asymmetric'"
            )
        if self.name == "clip_asymmetric" and self.clip_high is None:
            raise ValueError("ratio control 'clip_asymmetric' needs clip_high (e.g. clip_low=0.2, clip_high=0.28)")
        checks = {
            "dual_clip": (self.dual_clip, self.dual_clip > 1.0, "> 1"),
            "spo_eps": (self.spo_eps, self.spo_eps > 0.0, "> 0"),
            "gate_temperature_pos": (self.gate_temperature_pos, self.gate_temperature_pos > 0.0, "> 0"),
            "gate_temperature_neg": (self.gate_temperature_neg, self.gate_temperature_neg > 0.0, "> 0"),
            "kl_coef": (self.kl_coef, self.kl_coef >= 0.0, ">= 0"),
            "kl_target": (self.kl_target, self.kl_target > 0.0, "> 0"),
        }
        for key, (value, ok, allowed) in checks.items():
            if not ok:
                raise ValueError(f"ratio control {key}={value!r}: must be {allowed}")

    def adapted(self, measured_kl: float) -> RatioControl:
        """The control to use for the next update: beta adapted for ``kl_penalty_adaptive``, else ``self``."""
        if self.name != "kl_penalty_adaptive":
            return self
        return dataclasses.replace(self, kl_coef=adapt_kl_coef(self.kl_coef, measured_kl, self.kl_target))

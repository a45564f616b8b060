"""Small parts every off-policy algorithm's config and state share: the rate checks and named-part state."""

from __future__ import annotations


def check_rates(config) -> None:
    """ValueError unless ``config.learning_rate > 0``, ``tau`` in (0, 1] and ``gamma`` in [0, 1] (every off-policy
    algorithm's config checks these first)."""
    if config.learning_rate <= 0.0 or not 0.0 < config.tau <= 1.0 or not 0.0 <= config.gamma <= 1.0:
        raise ValueError(
            f"need learning_rate > 0, tau in (0, 1], gamma in [0, 1]; got {config.learning_rate}, {config.tau}, "
            f"{config.gamma}"
        )


class NamedState:
    """``state_dict``/``load_state_dict`` of an algorithm as the state of its parts named in ``STATE_PARTS``
    (modules and optimizers)."""

    STATE_PARTS: tuple[str, ...] = ()

    def state_dict(self) -> dict:
        return {name: getattr(self, name).state_dict() for name in self.STATE_PARTS}

    def load_state_dict(self, state: dict) -> None:
        for name in self.STATE_PARTS:
            getattr(self, name).load_state_dict(state[name])

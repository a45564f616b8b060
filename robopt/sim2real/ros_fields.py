"""Numbers out of decoded ROS messages (numpy only): a field by its dotted path, a field's numbers in order, and
the gravity direction in the body frame from an orientation quaternion. Used by the deploy map
(``robopt.sim2real.ros_map``) and the topic robot (``robopt.sim2real.topic_robot``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["flatten", "get_field", "gravity_in_body"]


def flatten(value) -> np.ndarray:
    """The numbers of a decoded field in declaration order (a message's numeric fields, an array, a number)."""
    if isinstance(value, dict):
        parts = [flatten(v) for v in value.values() if not isinstance(v, str)]
        return np.concatenate(parts) if parts else np.zeros(0)
    if isinstance(value, np.ndarray):
        return value.astype(np.float64, copy=False).reshape(-1)
    if isinstance(value, list):
        raise ValueError("a list of messages is not a vector of numbers")
    return np.asarray([float(value)])


def get_field(message: dict, path: str):
    value = message
    for name in path.split("."):
        value = value[name]
    return value


def gravity_in_body(quaternion: np.ndarray) -> np.ndarray:
    """Unit gravity direction in the body frame, R(q)^T [0, 0, -1], for unit quaternions (x, y, z, w)."""
    q = np.asarray(quaternion, dtype=np.float64).reshape(-1, 4)
    norm = np.linalg.norm(q, axis=1, keepdims=True)
    x, y, z, w = (q / np.where(norm > 0, norm, 1.0)).T
    # third row of R(q), negated: R^T e_z = (2(xz - wy), 2(yz + wx), 1 - 2(x^2 + y^2))
    return -np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], axis=1).reshape(-1)

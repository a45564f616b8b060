"""Atomic checkpoints (write to a temporary file, then rename) loaded with ``weights_only=True``."""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import torch

LAST_CHECKPOINT = "checkpoints/last.pt"  # a run directory's newest checkpoint (resume, evaluation, warm starts)


def save_checkpoint(path: Path, state: dict) -> None:
    """Write ``state`` atomically: a crash mid-write never leaves a truncated file under ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    torch.save(state, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: Path) -> dict:
    """Load a checkpoint without executing pickled code."""
    return torch.load(path, map_location="cpu", weights_only=True)


def rng_state() -> dict:
    """torch, numpy and python RNG states in a weights_only-safe form."""
    numpy_state = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "numpy": [numpy_state[0], torch.from_numpy(numpy_state[1].astype(np.int64)), *numpy_state[2:]],
        "python": list(random.getstate()[1]) + [random.getstate()[0], random.getstate()[2]],
    }


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), *rest))
    *internal, version, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))

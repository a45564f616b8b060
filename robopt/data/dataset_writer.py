"""Writing demonstrations as a Minari dataset: checked, staged in a temporary directory, moved into place.

Shapes: T steps of one episode, D obs dim, A action dim. The on-disk layout and the id rules are in
``robopt.data.demonstrations`` (which reads datasets back); Minari is imported only when a dataset is written.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from robopt.data.demonstrations import (
    METADATA_FILE,
    MINARI_ROOT_VARIABLE,
    dataset_path,
    datasets_root,
    first_line,
    normalize_dataset_id,
    require_minari,
)
from robopt.data.recording import Episode
from robopt.options import ConfigError


def check_can_write(dataset_id: str, root: str | Path | None = None, force: bool = False) -> Path:
    """The target directory; ConfigError when it exists (without ``force``) or holds something else."""
    target = dataset_path(dataset_id, root)
    if target.exists() or target.is_symlink():
        if not force:
            raise ConfigError(f"dataset {str(target)!r} already exists; use --force to replace it")
        if not (target / "data" / METADATA_FILE).is_file():
            raise ConfigError(f"{str(target)!r} exists and is not a Minari dataset; not replacing it even with --force")
    return target


def write_dataset(
    dataset_id: str,
    episodes: list[Episode],
    env_id: str,
    obs_dim: int,
    action_dim: int,
    action_low,
    action_high,
    root: str | Path | None = None,
    force: bool = False,
    metadata: dict | None = None,
) -> Path:
    """Write ``episodes`` as the Minari dataset ``dataset_id`` under the root; returns its directory.

    Everything is checked first, then written into a hidden staging directory in the root and moved into
    place, so an error leaves no partial dataset; with ``force`` an existing dataset is replaced.
    ``metadata`` (JSON-serializable) is stored as ``robopt_metadata``; its ``algorithm_name``, if any, also fills
    Minari's own ``algorithm_name`` field.
    """
    dataset_id = normalize_dataset_id(dataset_id)
    target = check_can_write(dataset_id, root, force)
    low = _bounds(action_low, action_dim, "action_low")
    high = _bounds(action_high, action_dim, "action_high")
    _check_episodes(episodes, obs_dim, action_dim)
    if not isinstance(env_id, str) or not env_id:
        raise ConfigError(f"env_id must be a non-empty string, got {env_id!r}")
    extra = dict(metadata or {})
    try:
        json.dumps(extra)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"dataset metadata must be JSON-serializable: {first_line(error)}") from None
    minari = require_minari()
    root_dir = datasets_root(root)
    try:
        root_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".robopt-staging-", dir=root_dir))
    except OSError as error:
        raise ConfigError(f"cannot write datasets under {str(root_dir)!r}: {first_line(error)}") from None
    try:
        _write_minari(minari, staging, dataset_id, episodes, env_id, obs_dim, low, high, extra)
        _copy_namespace_markers(staging, root_dir, dataset_id)
        _move_into_place(staging / dataset_id, target, staging / "replaced", force)
    except OSError as error:
        raise ConfigError(f"cannot write dataset {str(target)!r}: {first_line(error)}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _bounds(values, action_dim: int, name: str) -> np.ndarray:
    """Action bounds as float32 [A] (a scalar is broadcast); ConfigError for any other shape."""
    array = np.asarray(values.detach().cpu() if isinstance(values, torch.Tensor) else values, dtype=np.float32)
    if array.ndim == 0:
        array = np.full(action_dim, array, dtype=np.float32)
    if array.shape != (action_dim,):
        raise ConfigError(f"{name} must have {action_dim} entries (one per action), got shape {tuple(array.shape)}")
    return array


def _check_episodes(episodes: list[Episode], obs_dim: int, action_dim: int) -> None:
    if not episodes:
        raise ConfigError("no episodes to write (a dataset needs at least one)")
    for index, episode in enumerate(episodes):
        steps = len(np.asarray(episode.rewards))
        shapes = [
            np.shape(a)
            for a in (episode.observations, episode.actions, episode.rewards, episode.terminations, episode.truncations)
        ]
        expected = [(steps + 1, obs_dim), (steps, action_dim), (steps,), (steps,), (steps,)]
        if steps < 1 or shapes != expected:
            raise ConfigError(
                f"episode {index}: expected observations, actions, rewards, terminations, truncations of shapes "
                f"{expected} (T >= 1, observations include the final one), got {shapes}"
            )


def _write_minari(minari, staging: Path, dataset_id: str, episodes, env_id, obs_dim, low, high, extra) -> None:
    """``minari.create_dataset_from_buffers`` into ``staging`` (its root for the call), then robopt's metadata."""
    from gymnasium.spaces import Box
    from minari.data_collector import EpisodeBuffer

    buffers = [
        EpisodeBuffer(
            observations=np.asarray(e.observations, dtype=np.float32),
            actions=np.asarray(e.actions, np.float32),
            rewards=np.asarray(e.rewards, np.float32),
            terminations=np.asarray(e.terminations, bool),
            truncations=np.asarray(e.truncations, bool),
        )
        for e in episodes
    ]
    obs_space = Box(-np.inf, np.inf, (obs_dim,), np.float32)
    action_space = Box(low, high, (len(low),), np.float32)
    description = f"robopt demonstrations on {env_id}: {len(episodes)} episodes"
    with _minari_root(staging), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Minari warns about every optional field left empty (email, permalink...)
        written = minari.create_dataset_from_buffers(
            dataset_id,
            buffers,
            algorithm_name=str(extra.get("algorithm_name", "robopt")),
            author="robopt",
            description=description,
            observation_space=obs_space,
            action_space=action_space,
            data_format="hdf5",
        )
        written.storage.update_metadata({"robopt_env_id": env_id, "robopt_metadata": extra})


@contextlib.contextmanager
def _minari_root(path: Path) -> Iterator[None]:
    """``$MINARI_DATASETS_PATH`` set to ``path`` for the duration of a Minari call, then restored."""
    previous = os.environ.get(MINARI_ROOT_VARIABLE)
    os.environ[MINARI_ROOT_VARIABLE] = str(path)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(MINARI_ROOT_VARIABLE, None)
        else:
            os.environ[MINARI_ROOT_VARIABLE] = previous


def _copy_namespace_markers(staging: Path, root_dir: Path, dataset_id: str) -> None:
    """Minari marks each namespace directory with ``namespace_metadata.json``; add the missing ones to the root."""
    parts = dataset_id.split("/")[:-1]
    for depth in range(1, len(parts) + 1):
        relative = Path(*parts[:depth]) / "namespace_metadata.json"
        if (staging / relative).is_file() and not (root_dir / relative).exists():
            (root_dir / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(staging / relative, root_dir / relative)


def _move_into_place(new: Path, target: Path, backup: Path, force: bool) -> None:
    """Rename the staged dataset onto ``target``; an old one (``force``) is moved aside first and restored on error."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if not (target.exists() or target.is_symlink()):
        new.rename(target)
        return
    if not force:  # appeared while this dataset was being written
        raise ConfigError(f"dataset {str(target)!r} already exists; use --force to replace it")
    target.rename(backup)
    try:
        new.rename(target)
    except OSError:
        backup.rename(target)
        raise

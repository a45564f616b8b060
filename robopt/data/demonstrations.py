"""Demonstrations as Minari datasets: names and roots, and reading them back as flat transitions.

Shapes: N envs, T steps of one episode, M transitions over all episodes, D obs dim, A action dim.

On disk (Minari 0.5, HDF5): ``<root>/<dataset id>/data/{metadata.json, main_data.hdf5}`` where the root is the
``root`` argument, else ``$MINARI_DATASETS_PATH``, else ``~/.minari/datasets``. An episode keeps T + 1
observations (the final one included) and terminations apart from truncations. robopt ids (``mujoco/Hopper``,
``robopt/MultiGoal``) are not Gymnasium ids, so the dataset has no ``env_spec``; robopt's id is stored in
``metadata.json`` under ``robopt_env_id`` and the caller's metadata under ``robopt_metadata``.
Minari is imported only inside the functions that need it, and only its local functions are called.
Writing is ``robopt.data.dataset_writer``; ``record_episodes`` (``robopt.data.recording``) and ``write_dataset``
are re-exported by ``robopt.data``.
"""

from __future__ import annotations

import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from robopt.data.lerobot_format import is_lerobot_dataset, read_lerobot
from robopt.data.recording import Episode
from robopt.options import ConfigError

MINARI_ROOT_VARIABLE = "MINARI_DATASETS_PATH"
METADATA_FILE = "metadata.json"
_SEGMENT = r"[A-Za-z0-9_][-A-Za-z0-9_]*"
_DATASET_ID = re.compile(rf"(?:{_SEGMENT}/)*{_SEGMENT}-v\d+")  # Minari's (namespace/)name-vN
_VERSION = re.compile(r"-v\d+$")


@dataclass(frozen=True)
class DatasetInfo:
    """Where a dataset was read from and what it says about itself."""

    path: Path  # the dataset directory (holding data/)
    dataset_id: str
    env_id: str  # robopt's env id; a foreign dataset's Gymnasium id; "" when unknown
    metadata: dict = field(default_factory=dict)  # what the writer passed as ``metadata``


@dataclass(frozen=True)
class Demonstrations:
    """All transitions of a dataset, flattened over episodes, as torch tensors on the CPU."""

    obs: torch.Tensor  # [M, D] float32
    action: torch.Tensor  # [M, A] float32
    reward: torch.Tensor  # [M] float32
    next_obs: torch.Tensor  # [M, D] float32 (the final observation at an episode's last step)
    terminated: torch.Tensor  # [M] bool
    truncated: torch.Tensor  # [M] bool
    episode_index: torch.Tensor  # [M] int64
    env_id: str
    num_episodes: int
    episode_returns: list[float]
    path: Path
    metadata: dict = field(default_factory=dict)

    @property
    def num_transitions(self) -> int:
        return self.obs.shape[0]


# ----------------------------------------------------------------------------------------------------- names


def normalize_dataset_id(name: str) -> str:
    """``halfcheetah/medium`` -> ``halfcheetah/medium-v0``; a malformed name is a one-line ConfigError."""
    name = str(name).strip()
    if not _VERSION.search(name):
        name = f"{name}-v0"
    namespace = name.rpartition("/")[0]
    if not _DATASET_ID.fullmatch(name) or (namespace and len(namespace) < 2):
        raise ConfigError(
            f"bad dataset name {name!r}: expected [namespace/]name[-vN] of letters, digits, '-' and '_', with a "
            "namespace of 2+ characters (e.g. pendulum/expert or pendulum/expert-v1)"
        )
    return name


def datasets_root(root: str | Path | None = None) -> Path:
    """``root``, else ``$MINARI_DATASETS_PATH``, else Minari's default ``~/.minari/datasets``; made absolute."""
    if root is None:
        root = os.environ.get(MINARI_ROOT_VARIABLE) or Path.home() / ".minari" / "datasets"
    return Path(root).expanduser().absolute()


def dataset_path(dataset_id: str, root: str | Path | None = None) -> Path:
    """The directory of a dataset id under the root (whether it exists or not)."""
    return datasets_root(root) / normalize_dataset_id(dataset_id)


def require_minari():
    """The ``minari`` module, or a one-line ConfigError naming the extra to install."""
    try:
        import minari
    except ImportError:
        raise ConfigError("demonstrations need Minari, which is not installed: pip install 'robopt[data]'") from None
    return minari


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__


# ----------------------------------------------------------------------------------------------------- read


def read_episodes(dataset: str | Path, root: str | Path | None = None) -> tuple[list[Episode], DatasetInfo]:
    """The episodes of a dataset (a Minari id under the root, or a Minari or LeRobot dataset directory) and what it
    says about itself."""
    path = _resolve_for_reading(dataset, root)
    if is_lerobot_dataset(path):
        episodes, env_id, metadata = read_lerobot(path)
        return episodes, DatasetInfo(path, path.name, env_id, metadata)
    data_dir = path / "data" if (path / "data").is_dir() else path
    if not (data_dir / METADATA_FILE).is_file():
        raise ConfigError(
            f"{str(path)!r} is neither a Minari dataset (data/{METADATA_FILE} and the episode file) nor a LeRobot "
            "dataset (meta/info.json and data/ parquet files)"
        )
    minari = require_minari()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            source = minari.MinariDataset(data_dir)
            raw_metadata = source.storage.metadata
            raw = [(e.observations, e.actions, e.rewards, e.terminations, e.truncations) for e in source]
            env_spec = source.env_spec
    except Exception as error:  # h5py, json and Minari raise many types for a damaged dataset: report one line
        raise ConfigError(
            f"dataset {str(path)!r} could not be read as a Minari dataset ({first_line(error)})"
        ) from None
    episodes = [_checked_episode(path, index, *arrays) for index, arrays in enumerate(raw)]
    if not episodes:
        raise ConfigError(f"dataset {str(path)!r} holds no episodes")
    sizes = {(e.observations.shape[1], e.actions.shape[1]) for e in episodes}
    if len(sizes) > 1:
        raise ConfigError(f"dataset {str(path)!r} mixes observation/action sizes {sorted(sizes)}")
    env_id = raw_metadata.get("robopt_env_id") or (env_spec.id if env_spec is not None else "")
    extra = raw_metadata.get("robopt_metadata") or {}
    return episodes, DatasetInfo(path, str(raw_metadata.get("dataset_id", "")), str(env_id), dict(extra))


def _resolve_for_reading(dataset: str | Path, root: str | Path | None) -> Path:
    """A dataset id under the root (preferred), else an existing directory; ConfigError when neither exists."""
    name = str(dataset)
    if not isinstance(dataset, Path) and _DATASET_ID.fullmatch(name if _VERSION.search(name) else f"{name}-v0"):
        path = dataset_path(name, root)
        if path.is_dir():
            return path
        if not Path(name).expanduser().is_dir():
            raise ConfigError(
                f"dataset {normalize_dataset_id(name)!r} not found: no Minari dataset at {str(path)!r} "
                "(record one with `robopt collect`, or give the dataset directory)"
            )
    path = Path(dataset).expanduser()
    if not path.is_dir():
        raise ConfigError(
            f"dataset {name!r} not found: no directory at {str(path)!r} (expected a Minari or LeRobot dataset)"
        )
    return path


def _checked_episode(path: Path, index: int, observations, actions, rewards, terminations, truncations) -> Episode:
    """The stored arrays as an Episode; ConfigError naming the episode when their shapes do not fit together."""
    if not all(isinstance(a, np.ndarray) and a.ndim == 2 for a in (observations, actions)):
        raise ConfigError(
            f"dataset {str(path)!r}: episode {index} does not hold flat Box observations and actions "
            "(robopt reads [T+1, D] observations and [T, A] actions only)"
        )
    steps = len(rewards)
    lengths = (len(observations), len(actions), len(terminations), len(truncations))
    if steps < 1 or lengths != (steps + 1, steps, steps, steps):
        raise ConfigError(
            f"dataset {str(path)!r} is corrupted: episode {index} has {len(observations)} observations, "
            f"{len(actions)} actions and {steps} rewards (expected T + 1, T and T with T >= 1)"
        )
    return Episode(
        observations=observations.astype(np.float32, copy=False),
        actions=actions.astype(np.float32, copy=False),
        rewards=np.asarray(rewards, dtype=np.float32),
        terminations=np.asarray(terminations, dtype=bool),
        truncations=np.asarray(truncations, dtype=bool),
    )


def load_demonstrations(dataset: str | Path, root: str | Path | None = None) -> Demonstrations:
    """All transitions of a dataset (Minari id under the root, or a dataset directory) as flat float32 tensors."""
    episodes, info = read_episodes(dataset, root)
    lengths = [e.length for e in episodes]

    def stack(arrays: list[np.ndarray]) -> torch.Tensor:
        return torch.from_numpy(np.concatenate(arrays))

    return Demonstrations(
        obs=stack([e.observations[:-1] for e in episodes]),
        action=stack([e.actions for e in episodes]),
        reward=stack([e.rewards for e in episodes]),
        next_obs=stack([e.observations[1:] for e in episodes]),
        terminated=stack([e.terminations for e in episodes]),
        truncated=stack([e.truncations for e in episodes]),
        episode_index=torch.repeat_interleave(torch.arange(len(episodes)), torch.tensor(lengths)),
        env_id=info.env_id,
        num_episodes=len(episodes),
        episode_returns=[e.episode_return for e in episodes],
        path=info.path,
        metadata=info.metadata,
    )


def check_compatible(demos: Demonstrations, env_id: str, obs_dim: int, action_dim: int) -> None:
    """ConfigError unless the demonstrations fit an env: same observation and action sizes, same task.

    ``mujoco/<Task>`` and its Gymnasium twin (``mujoco/Hopper`` and ``Hopper-v5``) count as the same task; a
    dataset without an env id (foreign, no env spec) is checked on sizes only.
    """
    sizes = (demos.obs.shape[1], demos.action.shape[1])
    if sizes != (obs_dim, action_dim):
        raise ConfigError(
            f"demonstrations {str(demos.path)!r} have observation size {sizes[0]} and action size {sizes[1]}, "
            f"but env {env_id!r} has observation size {obs_dim} and action size {action_dim}"
        )
    if demos.env_id and _task_key(demos.env_id) != _task_key(env_id):
        raise ConfigError(
            f"demonstrations {str(demos.path)!r} were recorded on env {demos.env_id!r}, not {env_id!r} "
            "(the sizes match but the tasks differ)"
        )


def _task_key(env_id: str) -> str:
    from robopt.envs.registry import gymnasium_twin

    try:
        return gymnasium_twin(env_id)
    except ValueError:  # torch-native ids and unknown native ids compare by name
        return env_id

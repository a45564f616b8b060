"""Demonstrations in LeRobot's dataset format (v3.0: parquet episodes with metadata), state and action only.

Shapes: T frames of one episode, F frames over all episodes, D state width, A action width.

A LeRobot dataset is a folder (``lerobot`` 0.6.1's ``LeRobotDataset.create`` writes it; robopt pins its layout with a
dataset written by that code, tests/data/lerobot_tiny):

    meta/info.json                               codebase_version "v3.0", fps, features {name: dtype, shape, names},
                                                 totals, the path templates
    meta/tasks.parquet                           task_index and the task's text (the pandas index)
    meta/episodes/chunk-000/file-000.parquet     per episode: index, tasks, length, its frames' [from, to) rows
    meta/stats.json                              per feature: min, max, mean, std, count and quantiles
    data/chunk-XXX/file-YYY.parquet              one row per frame: ``observation.state`` [D], ``action`` [A],
                                                 ``next.reward``, ``next.done``, ``next.success`` (optional),
                                                 timestamp, frame_index, episode_index, index, task_index

robopt reads ``observation.state`` and ``action`` (a dataset whose observations are images only is refused: images
are out of scope for now), ``next.reward`` (0 when absent), ``next.done`` as the episode's termination (an episode
that ends without it was truncated) and ``next.success`` (the episode succeeded if any of its frames did). A frame
holds the observation its action was taken in, so an episode has no final observation; robopt repeats its last one
(what behaviour cloning reads is exact; an offline learner's last transition bootstraps from that observation when
the episode was truncated). robopt's env id and recording metadata go in ``meta/robopt.json``, a file LeRobot does not
read. pyarrow does the parquet (``pip install 'robopt[data]'``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from robopt.data.recording import Episode
from robopt.options import ConfigError

CODEBASE_VERSION = "v3.0"
INFO = Path("meta/info.json")
ROBOPT = Path("meta/robopt.json")
DATA_FILE = Path("data/chunk-000/file-000.parquet")
EPISODES_FILE = Path("meta/episodes/chunk-000/file-000.parquet")
TASKS_FILE = Path("meta/tasks.parquet")
STATS_FILE = Path("meta/stats.json")
STATE, ACTION = "observation.state", "action"
QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
INDEX_FEATURES = ("timestamp", "frame_index", "episode_index", "index", "task_index")  # LeRobot fills these itself


def is_lerobot_dataset(path: Path) -> bool:
    return (path / INFO).is_file()


def _pyarrow():
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise ConfigError("LeRobot datasets need pyarrow: pip install 'robopt[data]'") from None
    return pyarrow


# ----------------------------------------------------------------------------------------------------- read


def read_lerobot(path: Path) -> tuple[list[Episode], str, dict]:
    """The episodes of the LeRobot dataset folder ``path``, robopt's env id ("" for a foreign dataset) and metadata."""
    info = _read_info(path)
    features = info["features"]
    images = sorted(name for name, spec in features.items() if spec.get("dtype") in ("image", "video"))
    if STATE not in features:
        what = f"images only ({', '.join(images)})" if images else f"no {STATE}"
        raise ConfigError(
            f"LeRobot dataset {str(path)!r} has {what}: robopt reads state and action ({STATE}, {ACTION}); image "
            "observations are not supported yet"
        )
    if ACTION not in features:
        raise ConfigError(f"LeRobot dataset {str(path)!r} has no {ACTION!r} feature")
    columns = _read_frames(path, info)
    state, action = _matrix(path, columns, STATE), _matrix(path, columns, ACTION)
    frames = len(state)
    episode_index = np.asarray(columns["episode_index"], dtype=np.int64)
    reward = _vector(columns, "next.reward", frames, np.float32)
    done = _vector(columns, "next.done", frames, bool)
    success = _vector(columns, "next.success", frames, bool) if "next.success" in columns else None
    episodes, successes = [], []
    for index in np.unique(episode_index):  # frames of an episode are contiguous, in frame order
        rows = np.flatnonzero(episode_index == index)
        if rows[-1] - rows[0] + 1 != len(rows):
            raise ConfigError(f"LeRobot dataset {str(path)!r}: episode {index}'s frames are not contiguous")
        terminated = np.zeros(len(rows), dtype=bool)
        terminated[-1] = bool(done[rows[-1]])
        truncated = np.zeros(len(rows), dtype=bool)
        truncated[-1] = not terminated[-1]
        observations = np.concatenate([state[rows], state[rows[-1:]]])  # no final observation: the last repeated
        episodes.append(Episode(observations, action[rows], reward[rows], terminated, truncated))
        successes.append(None if success is None else bool(success[rows].any()))
    if not episodes:
        raise ConfigError(f"LeRobot dataset {str(path)!r} holds no frames")
    extra = json.loads((path / ROBOPT).read_text()) if (path / ROBOPT).is_file() else {}
    metadata = dict(extra.get("metadata", {}), fps=info["fps"], format="lerobot")
    if success is not None:
        metadata["episode_success"] = successes
        episodes = [_with_success(e, s) for e, s in zip(episodes, successes)]
    return episodes, str(extra.get("env_id", "")), metadata


def _with_success(episode: Episode, success: bool) -> Episode:
    return Episode(
        episode.observations, episode.actions, episode.rewards, episode.terminations, episode.truncations, success
    )


def _read_info(path: Path) -> dict:
    try:
        info = json.loads((path / INFO).read_text())
    except (OSError, ValueError) as error:
        raise ConfigError(f"{str(path)!r} is not a LeRobot dataset: {INFO} is unreadable ({error})") from None
    missing = [key for key in ("codebase_version", "fps", "features", "data_path") if key not in info]
    if missing:
        raise ConfigError(f"{str(path)!r} is not a LeRobot dataset: {INFO} lacks {', '.join(missing)}")
    if not str(info["codebase_version"]).startswith("v3."):
        raise ConfigError(
            f"LeRobot dataset {str(path)!r} is format {info['codebase_version']}; robopt reads {CODEBASE_VERSION} "
            "(convert older datasets with LeRobot's own conversion script)"
        )
    return info


def _read_frames(path: Path, info: dict) -> dict[str, list]:
    """Every data file's rows, in file order, as columns."""
    pyarrow = _pyarrow()
    files = sorted((path / "data").glob("chunk-*/file-*.parquet"))
    if not files:
        raise ConfigError(f"LeRobot dataset {str(path)!r} has no data files (expected data/chunk-*/file-*.parquet)")
    try:
        table = pyarrow.concat_tables([pyarrow.parquet.read_table(file) for file in files])
    except (OSError, pyarrow.ArrowException) as error:
        raise ConfigError(f"LeRobot dataset {str(path)!r}: a data file is unreadable ({error})") from None
    missing = [name for name in (STATE, ACTION, "episode_index") if name not in table.column_names]
    if missing:
        raise ConfigError(f"LeRobot dataset {str(path)!r}: its data files lack the column(s) {', '.join(missing)}")
    return {name: table.column(name).to_pylist() for name in table.column_names if name != "task"}


def _matrix(path: Path, columns: dict, name: str) -> np.ndarray:
    try:
        matrix = np.asarray(columns[name], dtype=np.float32)
    except ValueError:
        raise ConfigError(f"LeRobot dataset {str(path)!r}: {name} rows have different widths") from None
    return matrix[:, None] if matrix.ndim == 1 else matrix.reshape(len(matrix), -1)


def _vector(columns: dict, name: str, frames: int, dtype) -> np.ndarray:
    if name not in columns:
        return np.zeros(frames, dtype=dtype)
    return np.asarray(columns[name], dtype=dtype).reshape(frames, -1)[:, 0]


# ----------------------------------------------------------------------------------------------------- write


def write_lerobot(
    path: Path,
    episodes: list[Episode],
    env_id: str,
    fps: float,
    task: str,
    metadata: dict | None = None,
    force: bool = False,
) -> Path:
    """Write ``episodes`` as a LeRobot v3.0 dataset folder at ``path`` (replacing it only with ``force``)."""
    pyarrow = _pyarrow()
    if path.exists() and not force:
        raise ConfigError(f"{str(path)!r} already exists; pass --force to replace it")
    staging = path.with_name(path.name + ".writing")
    shutil.rmtree(staging, ignore_errors=True)
    successes = [e.success for e in episodes]
    with_success = all(s is not None for s in successes)
    lengths = [e.length for e in episodes]
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    frames = {
        STATE: np.concatenate([e.observations[:-1] for e in episodes]).astype(np.float32),
        ACTION: np.concatenate([e.actions for e in episodes]).astype(np.float32),
        "next.reward": np.concatenate([e.rewards for e in episodes]).astype(np.float32),
        "next.done": np.concatenate([e.terminations for e in episodes]).astype(bool),
    }
    if with_success:  # the success flag on the episode's last frame, as LeRobot's recorders set it
        frames["next.success"] = np.concatenate([np.arange(n) == n - 1 if s else np.zeros(n, bool)
                                                 for n, s in zip(lengths, successes)])  # fmt: skip
    frame_index = np.concatenate([np.arange(n) for n in lengths]).astype(np.int64)
    frames.update(
        timestamp=(frame_index / float(fps)).astype(np.float32),
        frame_index=frame_index,
        episode_index=np.repeat(np.arange(len(episodes)), lengths).astype(np.int64),
        index=np.arange(sum(lengths), dtype=np.int64),
        task_index=np.zeros(sum(lengths), dtype=np.int64),
    )
    features = {name: _feature(values) for name, values in frames.items()}
    _write_table(pyarrow, staging / DATA_FILE, frames, features)
    _write_episodes(pyarrow, staging / EPISODES_FILE, frames, lengths, starts, task)
    _write_tasks(pyarrow, staging / TASKS_FILE, task)
    stats = {name: _stats(values) for name, values in frames.items()}
    (staging / STATS_FILE).write_text(json.dumps(stats, indent=4))
    info = {
        "codebase_version": CODEBASE_VERSION,
        "fps": int(round(fps)) if abs(fps - round(fps)) < 1e-9 else fps,
        "features": features,
        "total_episodes": len(episodes),
        "total_frames": int(sum(lengths)),
        "total_tasks": 1,
        "chunks_size": 1000,
        "data_files_size_in_mb": 100,
        "video_files_size_in_mb": 200,
        "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
        "video_path": None,
        "robot_type": None,
        "splits": {"train": f"0:{len(episodes)}"},
    }
    (staging / INFO).write_text(json.dumps(info, indent=4))
    (staging / ROBOPT).write_text(json.dumps({"env_id": env_id, "metadata": metadata or {}}, indent=2, default=str))
    if path.exists():
        shutil.rmtree(path)
    staging.rename(path)
    return path


def _feature(values: np.ndarray) -> dict:
    dtype = {"float32": "float32", "bool": "bool", "int64": "int64"}[values.dtype.name]
    return {"dtype": dtype, "shape": [values.shape[1] if values.ndim == 2 else 1], "names": None}


def _column(pyarrow, values: np.ndarray):
    if values.ndim == 2:  # LeRobot's fixed-size lists for vector features
        return pyarrow.FixedSizeListArray.from_arrays(pyarrow.array(values.reshape(-1)), values.shape[1])
    return pyarrow.array(values)


def _write_table(pyarrow, file: Path, frames: dict, features: dict) -> None:
    file.parent.mkdir(parents=True, exist_ok=True)
    table = pyarrow.table({name: _column(pyarrow, values) for name, values in frames.items()})
    hugging_face = {name: _hf_feature(spec) for name, spec in features.items()}  # what `datasets` reads the file as
    table = table.replace_schema_metadata({"huggingface": json.dumps({"info": {"features": hugging_face}})})
    pyarrow.parquet.write_table(table, file)


def _hf_feature(spec: dict) -> dict:
    value = {"dtype": spec["dtype"], "_type": "Value"}
    return {"feature": value, "length": spec["shape"][0], "_type": "List"} if spec["shape"][0] > 1 else value


def _write_episodes(pyarrow, file: Path, frames: dict, lengths: list[int], starts: np.ndarray, task: str) -> None:
    """One row per episode: where its frames are, and its per-episode statistics (``stats/<feature>/<stat>``)."""
    file.parent.mkdir(parents=True, exist_ok=True)
    count = len(lengths)
    columns = {
        "episode_index": np.arange(count, dtype=np.int64),
        "tasks": pyarrow.array([[task]] * count, type=pyarrow.list_(pyarrow.string())),
        "length": np.asarray(lengths, dtype=np.int64),
        "data/chunk_index": np.zeros(count, dtype=np.int64),
        "data/file_index": np.zeros(count, dtype=np.int64),
        "dataset_from_index": starts,
        "dataset_to_index": starts + np.asarray(lengths, dtype=np.int64),
    }
    for name, values in frames.items():
        per_episode = [_stats(values[start : start + n]) for start, n in zip(starts, lengths)]
        for stat in per_episode[0]:
            kind = pyarrow.int64() if stat == "count" else pyarrow.float64()
            columns[f"stats/{name}/{stat}"] = pyarrow.array([s[stat] for s in per_episode], pyarrow.list_(kind))
    columns["meta/episodes/chunk_index"] = np.zeros(count, dtype=np.int64)
    columns["meta/episodes/file_index"] = np.zeros(count, dtype=np.int64)
    pyarrow.parquet.write_table(pyarrow.table(columns), file)


def _write_tasks(pyarrow, file: Path, task: str) -> None:
    """task_index and the task's text, the text as the pandas index (LeRobot reads the file with pandas)."""
    pandas = {
        "index_columns": ["task"],
        "column_indexes": [],
        "columns": [
            {"name": "task_index", "field_name": "task_index", "pandas_type": "int64", "numpy_type": "int64",
             "metadata": None},
            {"name": "task", "field_name": "task", "pandas_type": "unicode", "numpy_type": "object", "metadata": None},
        ],
    }  # fmt: skip
    table = pyarrow.table({"task_index": pyarrow.array([0], pyarrow.int64()), "task": [task]})
    pyarrow.parquet.write_table(table.replace_schema_metadata({"pandas": json.dumps(pandas)}), file)


def _stats(values: np.ndarray) -> dict:
    """min, max, mean, std, count and the quantiles LeRobot's normalizers read, per element."""
    matrix = values.reshape(len(values), -1).astype(np.float64)
    stats = {
        "min": matrix.min(0).tolist(),
        "max": matrix.max(0).tolist(),
        "mean": matrix.mean(0).tolist(),
        "std": matrix.std(0).tolist(),
        "count": [len(matrix)],
    }
    stats.update({name: np.quantile(matrix, q, axis=0).tolist() for name, q in QUANTILES.items()})
    return stats

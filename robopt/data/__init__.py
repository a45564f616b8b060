"""Datasets of demonstrations for offline learning and pretraining, stored in the Minari format.

``recording`` records whole episodes from any VecEnv (a trained policy or a scripted expert, with optional
Gaussian action noise), ``dataset_writer`` writes them as a Minari dataset (HDF5, Farama's standard for offline
RL data, always on local disk: nothing is ever downloaded) under ``$MINARI_DATASETS_PATH`` or
``~/.minari/datasets``, and ``demonstrations`` reads them back as flat torch transitions (``obs``, ``action``,
``reward``, ``next_obs``, ``terminated``, ``truncated``) with robopt's env id kept in the dataset's metadata.
``collect`` is what ``robopt collect`` runs. Minari is an optional dependency (``pip install 'robopt[data]'``),
imported only when a dataset is written or read.
"""

from robopt.data.dataset_writer import write_dataset
from robopt.data.demonstrations import (
    Demonstrations,
    check_compatible,
    dataset_path,
    load_demonstrations,
    normalize_dataset_id,
    read_episodes,
)
from robopt.data.recording import Episode, record_episodes

__all__ = [
    "Demonstrations",
    "Episode",
    "check_compatible",
    "dataset_path",
    "load_demonstrations",
    "normalize_dataset_id",
    "read_episodes",
    "record_episodes",
    "write_dataset",
]

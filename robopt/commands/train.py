"""What ``robopt train`` and ``pretrain`` do before a run: load its config (or the run to resume) and, with
``--nproc K``, check it once and launch K ranks through torch's elastic launcher.

Bad input is one line on stderr and exit code 2 (``robopt.cli_support.fail``), never a traceback.
"""

from __future__ import annotations

import os
import sys

from robopt.cli_support import fail
from robopt.options import ConfigError

__all__ = ["RANK_LOST_EXIT", "check_before_launch", "check_ranks", "launch_ranks", "launched_rank", "load_experiment"]

RANK_LOST_EXIT = 4  # a rank whose collective failed because another rank stopped


def launched_rank() -> bool:
    """Whether this process is one rank of a torchrun (or ``--nproc``) launch."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1) > 1


def check_ranks(nproc: int) -> None:
    """``--nproc`` is a count >= 1, given outside a torchrun launch; otherwise one line, exit 2."""
    if nproc < 1:
        fail(f"--nproc={nproc}: the number of processes must be >= 1")
    if launched_rank():
        fail("--nproc inside a torchrun launch: give the process count to torchrun (--nproc_per_node) only")


def check_before_launch(config, overrides, resume) -> None:
    """What every rank would refuse, refused once here: the config (or the run to resume), the device, and an
    algorithm whose kind runs in one process."""
    from robopt.build import algorithm_name, check_device, run_kind

    try:
        experiment = load_experiment(config, overrides, resume)
        check_device(experiment.device)
        kind = run_kind(experiment)
    except ConfigError as error:
        fail(str(error))
    if kind not in ("on_policy", "off_policy"):
        fail(
            f"data-parallel training (torchrun, --nproc) supports the on-policy and off-policy algorithms; "
            f"algo.name={algorithm_name(experiment)} runs as {kind} in one process"
        )


def launch_ranks(nproc: int, args: list[str]) -> None:
    """``robopt <args>`` on ``nproc`` ranks through torch's elastic launcher (what ``torchrun --standalone`` runs).

    When a rank fails the launcher stops the others; this prints which rank failed and its exit code, once.
    """
    import logging
    import uuid

    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    # the launcher logs each stop as warnings and errors with paths and pids (each module's logger has its own
    # level); the one line below says it
    for name in list(logging.root.manager.loggerDict):
        if name.startswith("torch.distributed"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # what torchrun sets per rank; robopt picks torch's threads itself
    launch = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=nproc,
        run_id=f"robopt-{uuid.uuid4().hex[:8]}",
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",
        max_restarts=0,
        monitor_interval=0.5,
    )
    try:
        elastic_launch(launch, sys.executable)("-m", "robopt", *args)
    except SignalException as error:  # Ctrl-C: the launcher passed it to the ranks, which checkpointed and stopped
        fail(f"stopped by signal {error.sigval}; rank 0 said where its checkpoint is", code=130)
    except ChildFailedError as error:
        # the cause, not its echo: a rank whose collective failed because another died exits 4 (RankLost), often
        # before the launcher has seen the dead one, so a rank killed by a signal or failing otherwise comes first
        rank, failure = min(
            error.failures.items(),
            key=lambda item: (item[1].exitcode == RANK_LOST_EXIT, item[1].exitcode >= 0, item[1].timestamp),
        )
        code = failure.exitcode
        how = f"signal {-code}" if code < 0 else f"exit code {code}"
        fail(
            f"rank {rank} of {nproc} stopped ({how}); the other ranks were stopped; the last checkpoint is kept",
            code=code if 0 < code < 126 else 1,
        )


def load_experiment(config, overrides, resume):
    """The config of ``train``/``pretrain``: CONFIG with overrides, or the run to resume (with overrides). Bad
    input is one line (``_fail``) or a ConfigError."""
    from robopt.checkpoint import LAST_CHECKPOINT
    from robopt.config import apply_overrides, build_dataclass, config_to_dict
    from robopt.experiment import ExperimentConfig, load_config, load_run_config

    if resume is not None:
        if config is not None and "=" in str(config):  # `train --resume RUN k=v`: the override landed in CONFIG
            overrides = [str(config), *(overrides or [])]
        elif config is not None:
            fail("give either CONFIG or --resume RUN_DIR, not both")
        if not (resume / LAST_CHECKPOINT).is_file():
            fail(f"cannot resume {str(resume)!r}: no checkpoint at {LAST_CHECKPOINT}")
        experiment = load_run_config(resume)
        if overrides:
            experiment = build_dataclass(ExperimentConfig, apply_overrides(config_to_dict(experiment), overrides))
        return experiment
    if config is None:
        fail("missing CONFIG (a YAML file in configs/) or --resume RUN_DIR")
    return load_config(config, overrides or [])

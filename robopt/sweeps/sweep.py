"""A sweep's directory and its trials run as Ray tasks, each an ordinary ``robopt train`` in its own process.

Trial ids are ``p<point>-s<seed>`` (``p00-s3``: grid point 0, seed 3). A trial's status file is written once,
atomically, when its run ends: ``finished`` (exit 0), ``pruned`` (a non-finite value stopped it, or the tuner
pruned it), ``failed`` (any other exit, with the run's one-line error). A trial without a status file is not done:
``--resume`` runs it again, continuing its run from the last checkpoint when there is one. A trial's process gets
``SIGTERM`` when its Ray worker dies (Linux), so a killed driver leaves no training behind.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from robopt.options import ConfigError
from robopt.sweeps.spec import point_label, point_overrides

SWEEP_FILE = "sweep.json"
PEER_KEY = "peer"  # a point {"peer": "sb3-ppo"} runs a peer library (robopt.sweeps.peers), not robopt train
CHECKPOINT = Path("checkpoints") / "last.pt"
NON_FINITE_EXIT = 3  # robopt train's exit code when a non-finite value stops the run


@dataclass(frozen=True)
class Trial:
    point: int
    seed: int

    @property
    def id(self) -> str:
        return f"p{self.point:02d}-s{self.seed}"


def status_of(exit_code: int) -> str:
    """A trial's status from its run's exit code: 0 finished, 3 (a non-finite value stopped it) pruned, else failed."""
    return "finished" if exit_code == 0 else "pruned" if exit_code == NON_FINITE_EXIT else "failed"


def write_json(path: Path, data: dict) -> None:
    """Write ``data`` atomically (temporary file, then rename): a kill never leaves half a file."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, path)


class Sweep:
    """The sweep directory: what was asked (``sweep.json``), each trial's status and run directory."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            self.spec = json.loads((self.path / SWEEP_FILE).read_text())
        except (OSError, json.JSONDecodeError):
            raise ConfigError(f"{str(self.path)!r} is not a sweep directory (no readable {SWEEP_FILE})") from None
        self.points: list[dict[str, str]] = self.spec["points"]
        self.seeds: list[int] = self.spec["seeds"]

    @classmethod
    def create(
        cls,
        root: Path,
        config_path: Path,
        overrides: list[str],
        points: list[dict],
        seeds: list[int],
        cpus_per_trial: int,
        kind: str = "sweep",
        extra: dict | None = None,
    ) -> Sweep:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
        path = Path(root) / config_path.stem / stamp
        (path / "trials").mkdir(parents=True)
        spec = {"kind": kind, "config": str(config_path.resolve()), "config_text": config_path.read_text(),
                "overrides": overrides, "points": points, "seeds": seeds, "cpus_per_trial": cpus_per_trial,
                **(extra or {})}  # fmt: skip
        write_json(path / SWEEP_FILE, spec)
        return cls(path)

    def add_point(self, point: dict[str, str]) -> int:
        """Append a point (the tuner's next one); returns its index."""
        self.points.append(point)
        self.spec["points"] = self.points
        write_json(self.path / SWEEP_FILE, self.spec)
        return len(self.points) - 1

    def trials(self) -> list[Trial]:
        """Seed by seed, every config of a seed before the next seed: the configs share the machine's drift in
        load (fair for time objectives), and a stopped sweep has seeds of every config."""
        return [Trial(point, seed) for seed in self.seeds for point in range(len(self.points))]

    def status(self, trial: Trial) -> dict | None:
        try:
            return json.loads((self.path / "trials" / f"{trial.id}.json").read_text())
        except (OSError, json.JSONDecodeError):
            return None

    def write_status(self, trial: Trial, status: dict) -> None:
        write_json(self.path / "trials" / f"{trial.id}.json", status)

    def run_root(self, trial: Trial) -> Path:
        return self.path / "runs" / trial.id

    def run_dir(self, trial: Trial) -> Path | None:
        """The trial's run directory (the newest, should a first start have left one without a checkpoint)."""
        dirs = sorted(self.run_root(trial).glob("*/*/config.yaml"), key=lambda p: p.parent.name)
        resumable = [p.parent for p in dirs if (p.parent / CHECKPOINT).is_file()]
        return (resumable or [p.parent for p in dirs] or [None])[-1]

    def command(self, trial: Trial, threads: int) -> list[str]:
        """``robopt train`` for ``trial``: resumed from its checkpoint when it has one (a peer's run: from scratch)."""
        peer = self.points[trial.point].get(PEER_KEY)
        if peer is not None:
            return self._peer_command(peer, trial)
        run_dir = self.run_dir(trial)
        base = [sys.executable, "-m", "robopt", "train"]
        if run_dir is not None and (run_dir / CHECKPOINT).is_file():
            return [*base, "--resume", str(run_dir), "--no-progress"]
        overrides = [*self.spec["overrides"], *point_overrides(self.points[trial.point]), f"seed={trial.seed}",
                     f"torch_threads={threads}", f"log.run_root={self.run_root(trial)}"]  # fmt: skip
        return [*base, self.spec["config"], *overrides, "--no-progress"]

    def _peer_command(self, peer: str, trial: Trial) -> list[str]:
        """A peer library's run on the config's task, steps and evaluation episodes (``robopt.sweeps.peers``)."""
        from robopt.experiment import load_config

        config = load_config(self.spec["config"], self.spec["overrides"])
        return [
            sys.executable,
            "-m",
            "robopt.sweeps.peers",
            peer,
            "--env",
            config.env.id,
            "--seed",
            str(trial.seed),
            "--steps",
            str(config.total_steps),
            "--run-root",
            str(self.run_root(trial)),
            "--eval-episodes",
            str(max(1, config.log.eval_episodes)),
        ]

    def label(self, trial: Trial) -> str:
        return f"{point_label(self.points[trial.point])} seed {trial.seed}"


def _die_with_parent() -> None:  # pragma: no cover (runs in the child between fork and exec)
    """Linux: SIGTERM to this process when the Ray worker that started it dies (prctl PR_SET_PDEATHSIG)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def execute(command: list[str], log_path: str, threads: int, cwd: str) -> tuple[int, str, float]:
    """Run one trial's command (a Ray task body): (exit code, its last error line, seconds)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[name] = str(threads)
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):  # a trial is one process
        env.pop(name, None)
    start = time.perf_counter()
    preexec = _die_with_parent if sys.platform.startswith("linux") else None
    with open(log_path, "a") as log:
        code = subprocess.run(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd, preexec_fn=preexec
        ).returncode
    seconds = time.perf_counter() - start
    lines = [line.strip() for line in Path(log_path).read_text(errors="replace").splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("robopt: error:")]
    return code, (errors or lines or [""])[-1][:300], seconds


class TrialRunner:
    """Trials as Ray tasks of ``cpus_per_trial`` CPUs each: submit, wait for the next to end, cancel."""

    def __init__(self, sweep: Sweep, cpus_per_trial: int, address: str = "", connect_timeout_s: float = 30.0) -> None:
        from robopt.fleet import ray_runtime

        if cpus_per_trial < 1:
            raise ConfigError(f"--cpus-per-trial={cpus_per_trial}: must be >= 1")
        ray = ray_runtime.import_ray("robopt sweep and tune")
        self.started = False
        if not ray.is_initialized():
            if address:
                ray_runtime.connect(address, connect_timeout_s, label="--address")
            else:
                ray_runtime.private_token()
                ray_runtime.init_embedded(os.cpu_count() or 1)  # a reaper ends its processes if this one is killed
            self.started = True
        available = float(ray.cluster_resources().get("CPU", 0.0))
        if cpus_per_trial > available:
            self.close()
            raise ConfigError(f"--cpus-per-trial={cpus_per_trial} but the Ray cluster has {available:g} CPUs")
        self.ray, self.sweep, self.cpus = ray, sweep, cpus_per_trial
        self.task = ray.remote(num_cpus=cpus_per_trial, max_retries=0)(execute)
        self.running: dict = {}  # ray ref -> trial

    def submit(self, trial: Trial) -> None:
        log = self.sweep.path / "trials" / f"{trial.id}.log"
        command = self.sweep.command(trial, self.cpus)
        self.running[self.task.remote(command, str(log), self.cpus, os.getcwd())] = trial

    def wait(self, timeout: float | None = None) -> list[tuple[Trial, dict]]:
        """Trials that ended (within ``timeout`` seconds), their status files written."""
        if not self.running:
            return []
        done, _ = self.ray.wait(list(self.running), num_returns=1, timeout=timeout)
        ended = []
        for ref in done:
            trial = self.running.pop(ref)
            try:
                code, error, seconds = self.ray.get(ref)
            except Exception as failure:  # noqa: BLE001 (a Ray worker lost: the trial failed, the sweep goes on)
                code, error, seconds = -1, (str(failure).strip().splitlines() or ["ray task failed"])[0], 0.0
            ended.append((trial, self.record(trial, code, error, seconds)))
        return ended

    def record(self, trial: Trial, code: int, error: str, seconds: float, status: str | None = None) -> dict:
        """Write ``trial``'s status file: ``status``, or the one its exit code says."""
        status = status or status_of(code)
        run_dir = self.sweep.run_dir(trial)
        result = {"status": status, "point": trial.point, "seed": trial.seed, "exit_code": code, "seconds": seconds,
                  "run_dir": str(run_dir) if run_dir else None, "error": error if code != 0 else ""}  # fmt: skip
        if run_dir is not None and (run_dir / "eval.json").is_file():
            result["eval_return"] = json.loads((run_dir / "eval.json").read_text())["mean_return"]
        self.sweep.write_status(trial, result)
        return result

    def cancel(self, trials: list[Trial] | None = None) -> None:
        """Stop running trials (all, or those given); their runs keep their last checkpoints."""
        for ref, trial in list(self.running.items()):
            if trials is None or trial in trials:
                self.ray.cancel(ref, force=True)
                self.running.pop(ref)

    def close(self) -> None:
        if self.started:
            from robopt.fleet import ray_runtime

            ray_runtime.shutdown(True)


def describe(trial: Trial, status: dict, sweep: Sweep) -> str:
    """One line per ended trial."""
    score = f"eval {status['eval_return']:.1f}" if "eval_return" in status else status.get("error", "")
    return f"trial {trial.id} {status['status']} ({sweep.label(trial)}, {status['seconds']:.0f} s): {score}"


def run_sweep(sweep: Sweep, address: str = "", echo=print) -> int:
    """Run every trial of ``sweep`` without a status; returns how many ended. Ctrl-C stops it (resumable)."""
    todo = [trial for trial in sweep.trials() if sweep.status(trial) is None]
    done = len(sweep.trials()) - len(todo)
    echo(f"{done} trials already done, {len(todo)} to run")
    runner = TrialRunner(sweep, int(sweep.spec["cpus_per_trial"]), address)
    try:
        for trial in todo:
            runner.submit(trial)
        while runner.running:  # short waits: a Ctrl-C is seen between them (ray.wait holds it while it blocks)
            for trial, status in runner.wait(timeout=1.0):
                echo(describe(trial, status, sweep))
    except KeyboardInterrupt:
        runner.cancel()
        raise
    finally:
        runner.close()
    return len(todo)

"""Every script in benchmarks/ runs end to end with ``--smoke`` (its smallest arguments), as a user runs it.

DESIGN.md section 2: a refactor must not silently break a quoted figure. Each script runs in a fresh interpreter
(``python benchmarks/<script> --smoke`` from the repository root, the tree first on PYTHONPATH) and must exit 0
and print its table: each pattern of its ``Smoke`` must match a line of its output, and no line may hold a
traceback or an ``error:`` row. The figures are not checked: at these budgets they mean nothing.

A script that needs what this venv lacks runs as far as it can: isaac_throughput.py measures its native side and
ends in Isaac Lab's one-line refusal (its whole run is tests/isaac/test_isaac_benchmark.py, ``make test-isaac``);
gpu_check.sh is tests/unit/test_gpu_check.py's (it parses, and its CPU path runs there). The scripts that start
Ray share the ``ray`` xdist group with the fleet's tests (one Ray at a time on 2 cores), data_parallel.py the
``data_parallel`` one (two ranks); the rest spread over the workers.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
NUMBER = r"-?[\d.,]+"


@dataclass(frozen=True)
class Smoke:
    """What a script's ``--smoke`` run must print: a regex per line that has to appear (``re.search``, multiline)."""

    expect: tuple[str, ...]
    group: str | None = None  # xdist group: the scripts that start Ray, or two processes of ranks
    args: tuple[str, ...] = ()  # beyond --smoke; "{tmp}" is the test's temporary directory
    files: tuple[str, ...] = ()  # written under {tmp} by those arguments
    returncode: int = 0
    refusal: str = ""  # the line a missing backend makes it print instead of its table
    unavailable: str = ""  # why the script cannot run here (a venv `make test` builds is missing): skipped


HAS_TRL = all(importlib.util.find_spec(name) for name in ("trl", "datasets"))
HAS_ISAAC = importlib.util.find_spec("isaaclab") is not None


def _metaworld_missing() -> str:
    from robopt.envs.metaworld_env import metaworld_python

    try:
        metaworld_python()
    except ValueError as error:
        return str(error)
    return ""


SMOKES = {
    "arm_reach.py": Smoke((rf"position_mm={NUMBER} .*within_goal={NUMBER} .*wall_time_s={NUMBER}$",)),
    "data_parallel.py": Smoke(
        (
            r"^gloo all_reduce of 142605 float32",
            r"^1proc +seed 0: +\d+ env steps/s",
            r"^2ranks +seed 0: +\d+",
            rf"^throughput 2ranks / 1proc: {NUMBER}x",
        ),
        group="data_parallel",
    ),
    "deploy_latency.py": Smoke((r"^runtime +path +median us", rf"^onnxruntime +numpy +{NUMBER} +{NUMBER}")),
    "deploy_rates.py": Smoke((r"^transport +rate_hz", r"^udp +100 +\d+", r"^ros2 +100 +\d+", r"^zenoh +100 +\d+")),
    "deploy_stamps.py": Smoke((r"^fault +tick_on", rf"^future_once +clock +{NUMBER} Hz", r"^bursts +measurement ")),
    "dppo_memory.py": Smoke((r"^ +K' +B +pairs", r"^ +2 +16 +32 ", r"K' 2: chain \[4, 4, 3, 12\]")),
    "env_throughput.py": Smoke((r"^task +N +robopt +sync", rf"^HalfCheetah +2( +{NUMBER}){{6}}$")),
    "finetune_hopper.py": Smoke(
        (r"^policy +stage mode", rf"^ogpo +ft +stochastic +{NUMBER} \+-", r"^diffusion +at +64 deterministic")
    ),
    "finetune_multimodal.py": Smoke((rf"^expo +ft +stochastic +{NUMBER} \+-", r"^gaussian +fine-tuning wall seconds")),
    "fleet_faults.py": Smoke((r"^kills seed done killed", r"^ +1 +0 +yes +\d+ +\d+", r"^ +1 +1/1 "), group="ray"),
    "fleet_fert.py": Smoke((r"^plain +0 ", r"^fert +0 ", r"^fert - plain over seeds 0:"), group="ray"),
    "fleet_scaling.py": Smoke(
        (r"^robots +held-out success", r"^ +1 +[\d.]+ \+- [\d.]+ +100 ", r"^plot: "),
        group="ray",
        args=("--out", "{tmp}/scaling.png"),
        files=("scaling.png", "scaling.json"),
    ),
    "fleet_throughput.py": Smoke(
        (r"^ +1 +\d+ +\d+ +\d+ ", rf"^hub\.sample +{NUMBER} \[", r"^replay\.sample"), group="ray"
    ),
    "flow_latency.py": Smoke((r"^policy +runtime +median us", rf"^expo 1 +torchscript +{NUMBER}", r"^gaussian +eager")),
    "fpo_cost.py": Smoke((rf"^FPO cost = {NUMBER}x PPO's iteration time", rf"^FPO/PPO env steps/s: model {NUMBER}")),
    "fpo_vs_ppo.py": Smoke((rf"^ppo +{NUMBER} \+-", rf"^fpo +{NUMBER} \+-", rf"^FPO env steps/s = {NUMBER}x PPO's")),
    "grpo_family.py": Smoke((rf"^sft +{NUMBER} \+-", rf"^trpo +{NUMBER} \+-")),
    "grpo_vs_trl.py": Smoke(
        (rf"^robopt +{NUMBER} \+-", *((r"^trl +", r"^robopt / TRL throughput") if HAS_TRL else (r"trl not installed",)))
    ),
    "her.py": Smoke(
        (rf"^no_her +{NUMBER} \+-", rf"^her +{NUMBER} \+-", r"^curves: "),
        args=("--out", "{tmp}/her.png"),
        files=("her.png",),
    ),
    "hil.py": Smoke((rf"^in process +return +{NUMBER}", rf"^udp +return +{NUMBER}", r"^udp 10 ms, 1% loss +return")),
    "isaac_throughput.py": Smoke(
        (r"^ +N +isaaclab +start s +native",),
        returncode=1,
        refusal=r"Isaac-Cartpole-Direct x 8 failed: .*Isaac Lab is not installed in this venv; run `make isaac`",
    ),
    "legged_hil.py": Smoke((r"^exported, parity", r"^\| in process \| ", r"^\| ROS 2, 10 ms, 1% loss \| ")),
    "manipulation_hil.py": Smoke(
        (r"^exported, parity", r"^sim-robot: episodes 2, .*success \d of 2", r"^\| ROS 2, 10 ms, 1% loss \| ")
    ),
    "lora_vs_full.py": Smoke((r"^ +16 +1 +full +\d+", r"^ +16 +1 +LoRA r2 +\d+", r"^LoRA adapters: h16 l1 r2: ")),
    "metaworld.py": Smoke(
        (
            rf"^throughput reach-v3: robopt, 16 rows in 2 worker\(s\): {NUMBER} env steps/s",
            rf"^reach-v3 +easy +expert +0 +{NUMBER}",
            rf"^reach-v3 +easy +dppo from bc +all +{NUMBER}",
        ),
        group="metaworld",
        unavailable=_metaworld_missing(),
    ),
    "memory_partial.py": Smoke(
        (rf"^\| gru \| {NUMBER} \+- ", rf"^\| sb3_lstm \| {NUMBER} \+- "),
        args=("--run-root", "{tmp}/memory"),
        files=("memory/summary.json",),
    ),
    "multimodal.py": Smoke((r"^budget 128 env steps", rf"^fpo +stoch +{NUMBER} \+-")),
    "multimodal_bc.py": Smoke((rf"^flow +determ +{NUMBER} \+-", rf"^gaussian +stocha +{NUMBER} \+-")),
    "offline_cost.py": Smoke((r"^algo +offline updates/s", rf"^expo +{NUMBER} +{NUMBER}$")),
    "offline_hopper.py": Smoke((rf"^iql +offline +{NUMBER} \+-", rf"^expo +10 +{NUMBER} \+-")),
    "ppo_vs_sb3.py": Smoke(
        (rf"^sb3 +{NUMBER} +{NUMBER} +{NUMBER} \+-", rf"^robopt +{NUMBER}", rf"robopt / sb3 \(wall-clock\): {NUMBER}x")
    ),
    "quadruped_tracking.py": Smoke((r"^run \| vel_steady \| vel_all", rf"quadruped_seed0/\S+ \| {NUMBER} \| ")),
    "ratio_controls.py": Smoke((r"^control +eval +train", rf"^sigmoid_gate +{NUMBER} \+-")),
    "recurrent_latency.py": Smoke((rf"^ +mlp: median +{NUMBER} us", rf"^gru / mlp median: {NUMBER}")),
    "robot_throughput.py": Smoke(
        (
            rf"^ +4 +1 \| +{NUMBER} \| +{NUMBER} \| {NUMBER} \| ",
            rf"PPO end to end .*: {NUMBER} env steps/s, {NUMBER} of raw",
        )
    ),
    "terrain_cost.py": Smoke((rf"^ +1 terrain +yes \| +{NUMBER} \| +{NUMBER}x \| ",)),
    "symmetry.py": Smoke((rf"^plain \| .* \| {NUMBER} \| ", rf"^mirrored \| .* \| {NUMBER} \| ")),
    "sac_vs_sb3.py": Smoke((rf"^sb3 +{NUMBER} ", rf"^robopt +{NUMBER} ", rf"robopt / sb3 \(CPU-time\): {NUMBER}x")),
    "sweep_throughput.py": Smoke(
        (r"^one after another: 1 runs in", r"^robopt sweep: +1 trials in", rf"^speed-up: {NUMBER}x"), group="ray"
    ),
    "time_to_return.py": Smoke(
        (r"^seed 0: ppo +3000:", r"^seed 0: sb3-ppo +3000:", r"sb3-ppo time / ppo time", r"^seed 0: ppo return after")
    ),
    "train_throughput.py": Smoke((rf"^ppo_halfcheetah_fast: {NUMBER} env steps/s \(\d+ iterations",)),
    "transfer.py": Smoke(
        (rf"^nominal: nominal {NUMBER} \+-", rf"^randomized: nominal {NUMBER} \+-", r"^wrote .*summary\.json"),
        args=("--out", "{tmp}/transfer"),
        files=("transfer/summary.json", "transfer/hopper_push.png"),
    ),
    "trpo_vs_sb3.py": Smoke(
        (r"^robopt \(Hopper-v5\) +2048 ", r"^sb3-contrib \(Hopper-v5\) +2048 ", r"^speed ratio robopt / sb3-contrib")
    ),
}
ELSEWHERE = {"gpu_check.sh": ROOT / "tests" / "unit" / "test_gpu_check.py"}  # runs there, GPU_CHECK_QUICK=1


def has_main(path: Path) -> bool:
    return 'if __name__ == "__main__":' in path.read_text()


def test_every_benchmark_has_a_smoke_run():
    """A new script gets its row here; the helper modules (no ``__main__``) are imported by the scripts."""
    scripts = {path.name for path in BENCHMARKS.iterdir() if path.suffix == ".sh" or has_main(path)}
    helpers = {path.name for path in BENCHMARKS.glob("*.py") if not has_main(path)}
    assert scripts == set(SMOKES) | set(ELSEWHERE), "benchmarks without a smoke run here (or rows without a script)"
    assert helpers == {"finetune_common.py", "smoke.py"}
    assert all(test.is_file() for test in ELSEWHERE.values())


def test_smoke_values_are_defaults_that_given_arguments_override():
    spec = importlib.util.spec_from_file_location("benchmark_smoke", BENCHMARKS / "smoke.py")
    smoke = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(smoke)

    def parse(*argv: str):
        parser = argparse.ArgumentParser()
        parser.add_argument("--steps", type=int, default=1000)
        parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
        return vars(smoke.parse_smoke_args(parser, {"steps": 10, "seeds": [0]}, argv))

    assert parse() == {"steps": 1000, "seeds": [0, 1, 2], "smoke": False}
    assert parse("--smoke") == {"steps": 10, "seeds": [0], "smoke": True}
    assert parse("--smoke", "--steps", "50") == {"steps": 50, "seeds": [0], "smoke": True}


def smoke_params():
    for name, smoke in SMOKES.items():
        marks = [pytest.mark.xdist_group(smoke.group)] if smoke.group else []
        yield pytest.param(name, smoke, id=name.removesuffix(".py"), marks=marks)


@pytest.mark.parametrize(("script", "smoke"), smoke_params())
def test_smoke(script: str, smoke: Smoke, tmp_path: Path):
    if smoke.unavailable:
        pytest.skip(smoke.unavailable)
    if smoke.refusal and HAS_ISAAC:
        pytest.skip("Isaac Lab is installed: tests/isaac/test_isaac_benchmark.py runs the whole smoke")
    args = [arg.replace("{tmp}", str(tmp_path)) for arg in smoke.args]
    ray_dir = tempfile.mkdtemp(prefix="robopt-ray-")  # Ray's socket paths must stay short: not under tmp_path
    python_path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": python_path, "ROBOPT_RAY_TMPDIR": ray_dir, "OMP_NUM_THREADS": "1"}
    try:
        done = subprocess.run(
            [sys.executable, str(BENCHMARKS / script), "--smoke", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=280,
            check=False,
        )
    finally:
        shutil.rmtree(ray_dir, ignore_errors=True)
    output = done.stdout + done.stderr
    shown = f"exit {done.returncode}\n--- stdout ---\n{done.stdout[-6000:]}\n--- stderr ---\n{done.stderr[-6000:]}"
    assert done.returncode == smoke.returncode, shown
    missing = [pattern for pattern in smoke.expect if not re.search(pattern, done.stdout, re.MULTILINE)]
    assert not missing, f"no line matches {missing}\n{shown}"
    if smoke.refusal:
        assert re.search(smoke.refusal, output), shown
        return
    assert "Traceback" not in output and not re.search(r"\berror: ", done.stdout), shown
    assert all((tmp_path / name).is_file() for name in smoke.files), shown

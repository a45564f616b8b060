"""Teacher-student distillation (``algo.name: distill``): a blind student learns a privileged teacher's actions on the
states its own actions reach, and what it cannot distil is one line (another robot or task, a privileged student)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from robopt.cli import app
from robopt.experiment import load_config
from robopt.runner import train

ROOT = Path(__file__).parents[2]
TEACHER = ROOT / "configs" / "ppo_quadruped_velocity.yaml"
SMALL = ["env.num_envs=32", "rollout.num_steps=8", "log.eval_episodes=0", "log.progress=false",
         "policy.hidden=[32]", "critic.hidden=[32]", "algo.minibatch_size=256", "algo.epochs=2"]  # fmt: skip
# the teacher sees the base's height and velocity too (a simulator's privileged knowledge)
PRIVILEGED = "task.observations.base_height={}"
STUDENT = [
    "algo={name: distill, num_steps: 8, epochs: 4, minibatch_size: 128, learning_rate: 3.0e-3}",
    "task.observations={base_ang_vel: {scale: 0.25}, projected_gravity: {}, velocity_command: {}, joint_pos: {}, "
    "joint_vel: {scale: 0.05}, last_action: {}}",
    "env.num_envs=32",
    "log.eval_episodes=0",
    "log.progress=false",
    "policy.hidden=[64]",
]


@pytest.fixture(scope="module")
def teacher(tmp_path_factory) -> Path:
    """A short PPO run whose output layer is then scaled up 30 times: a teacher whose actions (about 0.3 to 1 in
    size) depend on its whole observation, the privileged base height included (a fresh network's are near 0)."""
    root = tmp_path_factory.mktemp("teacher")
    overrides = [*SMALL, PRIVILEGED, "total_steps=512", f"log.run_root={root}"]
    run = train(load_config(TEACHER, overrides), progress=False).run_dir
    checkpoint = torch.load(run / "checkpoints" / "last.pt", weights_only=False)
    checkpoint["loop"]["policy"]["mean_net.layers.1.weight"] *= 30.0
    torch.save(checkpoint, run / "checkpoints" / "last.pt")
    return run


def test_the_student_learns_the_teachers_actions(teacher, tmp_path) -> None:
    overrides = [*STUDENT, f"algo.teacher_from={teacher}", "total_steps=7680", f"log.run_root={tmp_path}"]
    run = train(load_config(TEACHER, overrides), progress=False).run_dir
    rows = list(csv.DictReader((run / "progress.csv").open()))
    losses = [float(row["distill_loss"]) for row in rows]
    # the first iteration's loss (after its own 4 epochs) is 0.2 here; 30 iterations on the student's own
    # rollouts bring it to about 0.011
    assert len(losses) == 30 and losses[0] > 0.1, losses
    assert sum(losses[-5:]) / 5 < losses[0] / 5, losses


def _fails(*overrides: str) -> str:
    result = CliRunner().invoke(app, ["train", str(TEACHER), *STUDENT, "total_steps=256", *overrides])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1, result.output
    return result.output


def test_a_teacher_of_another_robot_or_task_is_one_line(teacher) -> None:
    changed = _fails(f"algo.teacher_from={teacher}", "robot.action_scale=0.3")
    assert "is a run of another robot: robot.action_scale differs (0.25 there, 0.3 here)" in changed
    commands = _fails(f"algo.teacher_from={teacher}", "task.episode_s=10.0")
    assert "is a run of another task: task.episode_s differs (20.0 there, 10.0 here)" in commands


def test_a_privileged_student_or_no_teacher_is_one_line(teacher, tmp_path) -> None:
    scan = _fails(f"algo.teacher_from={teacher}", "task.observations.height_scan={}")
    assert "task.observations.height_scan: the student observes what a robot computer can compute" in scan
    assert "algo.teacher_from is empty" in _fails()
    assert "is not a run directory with a checkpoint" in _fails(f"algo.teacher_from={tmp_path}")


def test_the_shipped_terrain_student_distils_from_a_terrain_teacher(tmp_path) -> None:
    # the shipped pair at toy sizes: the teacher sees a height scan, the student (a 5-step window, no scan, no base
    # velocity: `replace: [task.observations]`) is labelled through the teacher's own observation of the same state
    terrain = ["task.terrain.levels=2", "task.terrain.columns=10", "task.terrain.tile=4.0", "task.terrain.platform=1.0"]
    small = [*terrain, "env.num_envs=16", "log.eval_episodes=0", "log.progress=false", f"log.run_root={tmp_path}"]
    teacher_config = load_config(
        ROOT / "configs" / "ppo_quadruped_terrain.yaml", [*small, *SMALL[1:], "total_steps=128"]
    )
    assert list(teacher_config.task.observations)[-1] == "height_scan"
    teacher = train(teacher_config, progress=False).run_dir
    overrides = [*small, f"algo.teacher_from={teacher}", "total_steps=768", "algo.minibatch_size=128"]
    student_config = load_config(ROOT / "configs" / "distill_quadruped_terrain.yaml", overrides)
    assert (
        "height_scan" not in student_config.task.observations and "base_lin_vel" not in student_config.task.observations
    )
    run = train(student_config, progress=False).run_dir
    rows = list(csv.DictReader((run / "progress.csv").open()))
    assert len(rows) == 2 and all(float(row["distill_loss"]) > 0 for row in rows)
    assert "env/terrain_level" in rows[0]
    # the student exports as any robot policy (its window and the robot in the sidecar), without a height scan
    pytest.importorskip("onnxruntime")
    from robopt.sim2real.export import export_run

    report = export_run(run)
    assert max(report.max_difference.values()) <= 1e-5
    sidecar = (report.out_dir / "policy.json").read_text()
    assert "height_scan" not in sidecar and "joint_pos" in sidecar

"""Late and lost measurements (``task.link``): measured terms read ``latency`` ticks late, a lost topic repeats what
its row read last, the runtime's own terms and the command are never late; the state resumes; bad settings are one
line. Compared with the same env without a link, stepped with the same actions (observation noise off, so the two
draw the same numbers)."""

from __future__ import annotations

import pytest
import torch

from robopt.envs import make_env
from tests.robots.conftest import quadruped_sections

# configs/ppo_quadruped_velocity.yaml's observation: base_lin_vel (odom) 0-2, base_ang_vel 3-5 and projected_gravity
# 6-8 (imu), velocity_command 9-11 (the command), joint_pos 12-23 and joint_vel 24-35 (joint_states), last_action
# 36-47 (the runtime's)
TOPICS = {"odom": list(range(0, 3)), "imu": list(range(3, 9)), "joint_states": list(range(12, 36))}
MEASURED = [column for columns in TOPICS.values() for column in columns]
NOT_MEASURED = list(range(9, 12)) + list(range(36, 48))


def quadruped(num_envs: int, link: dict | None = None, noise: bool = False, **task_changes):
    robot, task = quadruped_sections()
    if not noise:
        for entry in task["observations"].values():
            entry.pop("noise", None)
    if link is not None:
        task["link"] = link
    task.update(task_changes)
    return make_env("robot", num_envs, backend="mujoco", robot=robot, task=task, seed=0, num_threads=1)


def rollout(env, steps: int, seed: int = 0) -> list[torch.Tensor]:
    """The observations of a reset and ``steps`` steps of small random actions; no episode may end in them."""
    generator = torch.Generator().manual_seed(seed)
    observations = [env.reset(seed=3)]
    for _ in range(steps):
        obs, _, terminated, truncated, _ = env.step(0.1 * torch.randn(env.num_envs, 12, generator=generator))
        assert not (terminated | truncated).any()
        observations.append(obs)
    return observations


def test_measured_terms_are_read_late_and_the_rest_is_not() -> None:
    plain, late = rollout(quadruped(4), 12), rollout(quadruped(4, {"latency": [2, 2]}), 12)
    assert quadruped(4).task.link is None  # no link: nothing to do, nothing drawn
    for t in range(13):
        # measured: the frame of two steps before (the first one while the episode is younger than that)
        torch.testing.assert_close(late[t][:, MEASURED], plain[max(t - 2, 0)][:, MEASURED], rtol=0, atol=0)
        torch.testing.assert_close(late[t][:, NOT_MEASURED], plain[t][:, NOT_MEASURED], rtol=0, atol=0)
    assert not torch.equal(plain[12][:, MEASURED], plain[10][:, MEASURED])  # the robot moved: the test can fail


def test_a_drawn_latency_per_row_and_episode() -> None:
    # the latency is drawn last at a reset, so both envs start the same episodes: row i reads frame t - d_i
    env = quadruped(16, {"latency": [0, 3]})
    plain, late = rollout(quadruped(16), 8), rollout(env, 8)
    delays = env.task.link.latency.tolist()
    assert set(delays) == {0, 1, 2, 3}
    for t in range(9):
        for row, delay in enumerate(delays):
            expected = plain[max(t - delay, 0)][row, MEASURED]
            torch.testing.assert_close(late[t][row, MEASURED], expected, rtol=0, atol=0)
    drawn = env.task.link.latency.clone()
    env.reset(seed=5)
    assert not torch.equal(env.task.link.latency, drawn)


def test_a_new_episode_reads_its_own_first_frame_until_its_latency_has_passed() -> None:
    # 6-step episodes (0.12 s at 50 Hz), truncated and reset inside env.step: after a reset, the measured terms are
    # the new episode's first frame for two steps, never the last episode's frames
    changes = {"episode_s": 0.12}
    plain_env, late_env = quadruped(2, **changes), quadruped(2, {"latency": [2, 2]}, **changes)
    generator = torch.Generator().manual_seed(0)
    plain, late = [plain_env.reset(seed=3)], [late_env.reset(seed=3)]
    start, starts = 0, []
    for t in range(1, 16):
        action = 0.1 * torch.randn(2, 12, generator=generator)
        obs, _, _, truncated, _ = plain_env.step(action)
        plain.append(obs)
        late.append(late_env.step(action)[0])
        starts.append(start)
        start = t if bool(truncated.all()) else start
    starts.append(start)
    assert sorted(set(starts)) == [0, 6, 12]  # two resets inside the rollout
    for t in range(16):
        expected = plain[max(t - 2, starts[t])][:, MEASURED]
        torch.testing.assert_close(late[t][:, MEASURED], expected, rtol=0, atol=0)


def test_a_lost_topic_repeats_what_its_row_read_last() -> None:
    n, steps = 16, 30
    plain, lossy = rollout(quadruped(n), steps), rollout(quadruped(n, {"drop": 0.5}), steps)
    lost = {topic: 0 for topic in TOPICS}
    for t in range(1, steps + 1):
        torch.testing.assert_close(lossy[t][:, NOT_MEASURED], plain[t][:, NOT_MEASURED], rtol=0, atol=0)
        for topic, columns in TOPICS.items():
            fresh = (lossy[t][:, columns] == plain[t][:, columns]).all(dim=1)  # [N]
            repeated = (lossy[t][:, columns] == lossy[t - 1][:, columns]).all(dim=1)
            assert (fresh | repeated).all()  # each row's topic is either this step's or the one it read before
            assert not (fresh & repeated).any()  # the robot moves: the two never coincide
            lost[topic] += int(repeated.sum())
    for topic, count in lost.items():  # 480 draws a topic at 0.5: 4 standard deviations is 0.09
        assert 0.41 < count / (n * steps) < 0.59, (topic, count)


def test_the_link_resumes_exactly() -> None:
    link = {"latency": [0, 2], "drop": 0.2}
    first, second = quadruped(3, link, noise=True), quadruped(3, link, noise=True)
    generator = torch.Generator().manual_seed(0)
    actions = [0.1 * torch.randn(3, 12, generator=generator) for _ in range(20)]
    first.reset(seed=2)
    for action in actions[:8]:
        first.step(action)
    assert first.task.link.latency.max() > 0  # the saved frames and pointer are read
    second.load_state_dict(first.state_dict())
    for action in actions[8:]:
        out_first, out_second = first.step(action), second.step(action)
        for a, b in zip(out_first[:4], out_second[:4], strict=True):  # same kernels and shapes: bit equality
            assert torch.equal(a, b)


@pytest.mark.parametrize(
    ("link", "changes", "message"),
    [
        ({"latency": [2, 1]}, {}, "task.link.latency: expected [low, high] integers with 0 <= low <= high <= 10"),
        ({"latency": [0, 11]}, {}, "task.link.latency: expected [low, high] integers with 0 <= low <= high <= 10"),
        ({"latency": [0, 1.5]}, {}, "latency"),
        ({"drop": 1.0}, {}, "drop: expected a probability in [0, 1), got 1.0"),
        ({"drop": -0.1}, {}, "drop: expected a probability in [0, 1), got -0.1"),
        ({"lag": 1}, {}, "lag"),
        (
            {"drop": 0.1},
            {"observations": {"velocity_command": {}, "last_action": {}}},
            "task.link: no observation term is measured on a topic",
        ),
    ],
)
def test_bad_link_is_one_line(link: dict, changes: dict, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        quadruped(2, link, **changes)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_simulated_robot_leaves_the_training_link_out() -> None:
    from robopt.sim2real.serving import make_sim_env

    env = make_sim_env("configs/ppo_quadruped_link.yaml")
    assert env.task.link is None and env.randomization.action_delay == (0, 0)
    assert env.task.frame.shape == (1, 48)

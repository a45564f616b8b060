"""MuJoCo's known asset warning is dropped; every other MuJoCo warning still reaches the user."""

from __future__ import annotations

import mujoco
import numpy as np

from robopt.envs import make_env
from robopt.envs.physics import quiet_known_asset_warnings

_BALL = '<mujoco><compiler settotalmass="2"/><worldbody><body><freejoint/><geom size=".1"/></body></worldbody></mujoco>'


def test_building_mujoco_envs_prints_no_settotalmass_warning(capfd) -> None:
    for env in (make_env("HalfCheetah-v5", 2), make_env("mujoco/HalfCheetah", 2, backend="mujoco")):
        env.close()
    captured = capfd.readouterr()
    assert "settotalmass" not in captured.err + captured.out


def test_the_filter_drops_only_the_known_warning(capfd) -> None:
    with quiet_known_asset_warnings():
        mujoco.MjModel.from_xml_string(_BALL)  # the deprecated attribute: dropped
        model = mujoco.MjModel.from_xml_string(_BALL.replace(' settotalmass="2"', ""))
        data = mujoco.MjData(model)
        data.qvel[:] = 1e20  # a deliberately unstable simulation: MuJoCo must still say so
        mujoco.mj_step(model, data)
    captured = capfd.readouterr()
    assert "settotalmass" not in captured.err
    assert "WARNING: Nan, Inf or huge value in QVEL" in captured.err
    assert mujoco.get_mju_user_warning() is None  # MuJoCo's own handler is back afterwards


def test_native_model_masses_match_the_compiled_attribute() -> None:
    # The native backend compiles without the attribute and rescales afterwards: same masses as MuJoCo's compiler.
    from robopt.envs.native_env import load_model
    from robopt.envs.physics import gymnasium_asset
    from robopt.envs.tasks import HalfCheetah

    with quiet_known_asset_warnings():
        reference = mujoco.MjModel.from_xml_path(gymnasium_asset(HalfCheetah.xml_file))
    model = load_model(HalfCheetah)
    assert np.isclose(model.body_mass.sum(), 14.0)  # half_cheetah.xml: settotalmass="14"
    for name in ("body_mass", "body_inertia", "body_subtreemass", "dof_invweight0", "actuator_acc0"):
        np.testing.assert_array_equal(getattr(model, name), getattr(reference, name), err_msg=name)

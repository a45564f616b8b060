"""Robots from their description, tasks from terms: a native batched env built from an MJCF and a YAML task.

A robot is any MJCF (Menagerie's, the user's, a description without actuators or floor; URDF through MuJoCo's
own import) plus the ``robot`` config section: actuated joints with PD gains, default pose, action scaling, base,
IMU, feet, timestep and decimation. ``builder`` edits the model with ``mujoco.MjSpec`` (floor, actuators, sites,
sensors) and hands the compiled model to the existing backends (``mujoco`` CPU threads, ``mujoco_warp``), which
learn nothing about robots. The ``task`` section picks observation, reward, termination and command terms by name
(``observations``, ``rewards``, ``terminations``, ``commands``): each term is a pure batched torch function of
``signals.Signals`` (the backend state read through the robot's index tables, plus a small context), and users add
their own with ``{hook: package.module:function}``. ``task.TermTask`` implements the same ``Task`` protocol as the
Gymnasium twins, so randomization, the privileged critic, export and video work unchanged. ``env.make_robot_env``
is the factory behind ``env.id: robot``. docs/robots.md is the user's guide.
"""

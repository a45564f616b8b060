"""Fleet learning: many robots feed one off-policy learner through an experience hub (docs/fleet.md).

``config`` (the ``fleet`` config section, registered there, and each robot's fixed dynamics), ``build`` (a fleet
run from its config: the loop kind ``fleet``), ``worker`` (a robot: a Ray actor owning its
env and a policy copy, sending whole episodes tagged with robot and policy version), ``hub`` and ``sampler``
(the experience hub on the replay storage: checks and quarantine, own/shared mix, staleness), ``loop`` (the
runner's loop over robots and learner: asynchronous collection, SAC/TD3 updates, published versions, restarts,
checkpoints), ``ray_runtime`` (embedded or joined Ray, nothing written outside temp) and ``retrieval`` (FERT's
failure-guided retrieval of successful segments). Ray is imported only where it is used: without the ``dist``
extra a fleet config stops with one line naming it. This file imports nothing.
"""

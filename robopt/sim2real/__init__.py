"""Sim-to-real: export a run's policy, run it on a robot through a torch-free runtime with safety limits.

Torch-free modules (what a robot computer needs: numpy, onnxruntime, pyyaml): ``sidecar``, ``protocol``,
``runtime``, ``window`` (an observation history's window), ``deploy`` and the network robot of ``robots``.
``export``, the simulated robot and ``server`` use torch and the simulators. Nothing is imported here, so
``import robopt.sim2real.runtime`` pulls in no torch.
"""

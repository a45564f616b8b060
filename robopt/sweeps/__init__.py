"""Experiments over many runs: seeds and grids (``robopt sweep``), tuning (``robopt tune``) and reports.

A sweep is a directory: ``sweep.json`` (the config file it was started from, its overrides, the grid points and
seeds), ``trials/<id>.json`` (each finished trial's status, written atomically), ``trials/<id>.log`` (the run's
output) and ``runs/<id>/`` (each trial's ordinary run directory). Every config x seed is an ordinary
``robopt train`` in its own process, launched as a Ray task (embedded Ray by default, a cluster with
``--address``); a run does not know it is part of a sweep. A killed sweep resumes with ``--resume SWEEP_DIR``:
finished trials are kept, a trial that has a checkpoint continues from it. ``robopt report`` reads the run
directories (``eval.json``, ``progress.csv``); its statistics (interquartile mean, bootstrap intervals, probability
of improvement) come from scipy. Tuning asks Optuna for the points (TPE sampler, median pruner, a SQLite study in
the sweep directory). A point can be a peer library instead (``--peer sb3-ppo``: ``peers``), whose runs write the
same files. Ray, Optuna and scipy are the ``sweep`` extra, imported inside the modules that use them.
"""

"""Language policies: a causal LM as a Policy whose log_ratio is per token, verifiable tasks, verifiers; the loop,
advantages, surrogate and updaters are the robot side's."""

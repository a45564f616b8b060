"""Environments behind the VecEnv contract (robopt.core.protocols.VecEnv)."""

from robopt.envs.registry import BACKENDS, list_env_ids, make_env

__all__ = ["BACKENDS", "list_env_ids", "make_env"]

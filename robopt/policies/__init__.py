"""Policies (Gaussian; diffusion and flow later) and critics."""

from robopt.policies.critics import ValueCritic
from robopt.policies.gaussian import GaussianPolicy

POLICIES = {"gaussian": GaussianPolicy}

__all__ = ["POLICIES", "GaussianPolicy", "ValueCritic"]

"""Reproduction of L-GreCo (Alimohammadi et al., MLSys 2024): Table 4, Table 1 and Fig. 9 analogues.

``spec.toml`` holds the paper's numbers and the claims; :mod:`.workload` plans and runs the cells
(real gloo DDP runs with the L-GreCo engine inside :func:`gcbench.envs.ddp_hook.gcbench_hook`).
"""

from .workload import SPEC_PATH, LGreCoWorkload, load, workload

__all__ = ["SPEC_PATH", "LGreCoWorkload", "load", "workload"]

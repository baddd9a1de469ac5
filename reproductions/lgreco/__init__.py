"""Reproduction of L-GreCo (Alimohammadi et al., MLSys 2024): Table 4, Table 1 and Fig. 9 analogues.

``spec.toml`` holds the paper's numbers and the claims; :mod:`.workload` plans and runs the cells
(real gloo DDP runs, :mod:`.ranks`, with the L-GreCo engine inside
:func:`gcbench.envs.ddp_hook.gcbench_hook`) and derives the measured numbers (:mod:`.metrics`);
:mod:`.report` writes the paper-specific parts of the report from the run's settings
(:mod:`.settings`). Models and data: :mod:`.vision`, :mod:`.resnet`, :mod:`.lm`; :mod:`.probe` trains
them a few steps on synthetic data for the cells' stamp.
"""

from .workload import SPEC_PATH, LGreCoWorkload, load, workload

__all__ = ["SPEC_PATH", "LGreCoWorkload", "load", "workload"]

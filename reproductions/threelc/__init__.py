"""Reproduction of 3LC (Lim, Andersen, Kaminsky, SysML 2019): traffic reduction per stage and in
total, accuracy against uncompressed training, and training time with modelled communication.

``spec.toml`` holds the paper's numbers (from reading notes on the paper, which quote the abstract's
results and summarise §3) and the claims; :mod:`.workload` plans and runs one training cell per
method (:mod:`.train`: W simulated workers and a parameter server, both directions compressed;
:mod:`.model`: the CIFAR ResNet; :mod:`.probe`: a few steps of it on synthetic images for the
cells' stamp); :mod:`.report` writes the paper-specific parts of the report
and :mod:`.discussion` its reading of the run's numbers;
:mod:`.settings` holds what both read (methods, data set, training configuration); :mod:`.drift`
(the per-window traffic series and its drift test) and :mod:`.timecurve` (the modelled time reduction
over link bandwidth) hold the two derived analyses. Data: :mod:`gcbench.data.images` (Fashion-MNIST IDX files,
CIFAR-10 binary batches, scikit-learn digits).
"""

from .workload import SPEC_PATH, ThreeLCWorkload, load, workload

__all__ = ["SPEC_PATH", "ThreeLCWorkload", "load", "workload"]

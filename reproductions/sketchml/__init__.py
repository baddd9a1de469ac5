"""Reproduction of SketchML (Jiang, Fu, Yang, Cui, SIGMOD 2018): Tables 2-4 and the numbers of Figs. 8-9.

``spec.toml`` holds the paper's numbers and the claims; :mod:`.workload` plans and runs the cells
(:mod:`.train`: the simulated Spark job; :mod:`.glm`: the models; :mod:`.messages`: key-value
messages as real bytes; :mod:`.netmodel`: modelled communication; :mod:`.probe`: a few epochs on synthetic
data for the cells' stamp); :mod:`.report` writes the
paper-specific parts of the report; :mod:`.settings` holds what both read (methods, models, data
set, learning rates).
"""

from .workload import SPEC_PATH, SketchMLWorkload, load, workload

#: Why this reproduction has no device option (``gcbench gpu-check`` reports it instead of running it).
CPU_ONLY = ("the paper's system is a Spark job on CPUs (§4): the simulated job trains with numpy/scipy "
            "and its measured times are CPU seconds of one thread")

__all__ = ["CPU_ONLY", "SPEC_PATH", "SketchMLWorkload", "load", "workload"]

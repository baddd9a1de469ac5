"""Reproduction of SketchML (Jiang, Fu, Yang, Cui, SIGMOD 2018): Tables 2-4 and the numbers of Figs. 8-9.

``spec.toml`` holds the paper's numbers and the claims; :mod:`.workload` plans and runs the cells
(:mod:`.train`: the simulated Spark job; :mod:`.glm`: the models; :mod:`.messages`: key-value
messages as real bytes; :mod:`.netmodel`: modelled communication); :mod:`.report` writes the
paper-specific parts of the report; :mod:`.settings` holds what both read (methods, models, data
set, learning rates).
"""

from .workload import SPEC_PATH, SketchMLWorkload, load, workload

__all__ = ["SPEC_PATH", "SketchMLWorkload", "load", "workload"]

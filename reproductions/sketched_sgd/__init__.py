"""Reproduction of Sketched-SGD (Ivkin, Rothchild, Ullah, Braverman, Stoica, Arora, NeurIPS 2019).

``spec.toml`` holds the paper's numbers (the slides' BLEU table and CIFAR-10 comparison) and the
claims; :mod:`.workload` plans and runs the cells: :mod:`.translation` (Table 1: a tiny transformer
and an LSTM on German-English sentence pairs, BLEU), :mod:`.vision` (local top-k against
Sketched-SGD as workers grow, a real DDP check), :mod:`.methods` (vanilla, true top-k,
Sketched-SGD, local top-k on gcbench's aggregation path; sketch and second round sized by the
paper's rule, §5.3; :mod:`.geometry` sizes a cell's sketch), :mod:`.models`; :mod:`.probe` runs a
few steps of them on synthetic data for the cells' stamp; :mod:`.report` writes the paper-specific parts of the report;
:mod:`.settings` holds what both read (the presets with the run's overrides, the methods).
"""

from .workload import SPEC_PATH, SketchedSGDWorkload, load, workload

__all__ = ["SPEC_PATH", "SketchedSGDWorkload", "load", "workload"]

"""Layer-wise adaptive compression: L-GreCo's engine, for any codec with a parameter ladder.

Alimohammadi, Markov, Frantar, Alistarh, "L-GreCo: Layerwise-Adaptive Gradient Compression for
Efficient and Accurate Deep Learning", MLSys 2024 (arXiv:2210.17357): Sec. 3 "constrained
optimisation problem", Sec. 4 "L-GreCo framework", Algorithm 1, Appendix A "bucket priority",
Appendix B "low-rank error".

Modules:

* :mod:`.ladders` - candidate parameters per codec (the paper's search ranges, Sec. 5.1).
* :mod:`.tables` - the error table ``E[l][j]`` (L2 norm of ``decode(encode(G_l)) - G_l`` of the
  accumulated gradient, no error feedback; PowerSGD also by SVD tail or power iteration, App. B)
  and the cost table ``C[l][j]`` (real serialized bytes, ``payload.nbytes``).
* :mod:`.dp` - Algorithm 1: error budget, discretisation, dynamic programme, reconstruction.
* :mod:`.comparators` - uniform, CGX's k-means assignment, global top-k, Accordion.
* :mod:`.timing` - the time objective (Sec. 4: per-bucket coefficients from a linear fit of
  measured sync time), bucket priority (App. A), and the overhead of Table 1.
* :mod:`.policy` - stateful per-layer policies (accumulate, decide every N steps on one rank,
  hand the choice to a broadcast the caller passes, hand out ``layer_params``). Nothing here
  communicates: the execution layer's side (the broadcast through its collectives, the policy
  plumbing of the DDP hook and the simulator, the sync-time model) is :mod:`gcbench.envs.adaptive`.
"""

from .comparators import (
    Accordion,
    Assignment,
    GlobalTopK,
    cgx_kmeans_choice,
    evaluate,
    global_topk,
    kmeans,
    uniform_choice,
)
from .dp import LGreCoResult, discretise, error_budget, lgreco, solve_dp
from .ladders import (
    Ladder,
    ladder_for,
    powersgd_ladder,
    qsgd_ladder,
    quantization_range,
    sketchml_ladder,
    sparsification_range,
    threelc_ladder,
    topk_ladder,
)
from .policy import AccordionPolicy, LayerwisePolicy, LGreCoPolicy, ScheduledPolicy
from .tables import Tables, measure_tables, power_iteration_errors, svd_tail_errors, topk_sorted_errors
from .timing import (
    LinearFit,
    Overhead,
    bucket_priority_costs,
    fit_bucket_coefficients,
    fit_linear,
    measure_overhead,
    overhead,
    time_costs,
)

__all__ = [
    "Accordion",
    "AccordionPolicy",
    "Assignment",
    "GlobalTopK",
    "LGreCoPolicy",
    "LGreCoResult",
    "Ladder",
    "LayerwisePolicy",
    "LinearFit",
    "Overhead",
    "ScheduledPolicy",
    "Tables",
    "bucket_priority_costs",
    "cgx_kmeans_choice",
    "discretise",
    "error_budget",
    "evaluate",
    "fit_bucket_coefficients",
    "fit_linear",
    "global_topk",
    "kmeans",
    "ladder_for",
    "lgreco",
    "measure_overhead",
    "measure_tables",
    "overhead",
    "power_iteration_errors",
    "powersgd_ladder",
    "qsgd_ladder",
    "quantization_range",
    "sketchml_ladder",
    "solve_dp",
    "sparsification_range",
    "svd_tail_errors",
    "threelc_ladder",
    "time_costs",
    "topk_ladder",
    "topk_sorted_errors",
    "uniform_choice",
]

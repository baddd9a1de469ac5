"""``gcbench gpu-check``: the CUDA paths proved on a GPU machine in one command (see :mod:`.run`)."""

from .run import PARTS, gpu_check_main

__all__ = ["PARTS", "gpu_check_main"]

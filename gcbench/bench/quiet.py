"""Silence torch's "No CUDA runtime is found, using CUDA_HOME=..." warning on machines without a CUDA device.

``torch.utils.cpp_extension`` logs it once per process when it is first imported (Inductor imports it
the first time a kernel compiles) on a machine that has a CUDA toolkit (``nvcc`` on the PATH, or
``CUDA_HOME``) but no usable CUDA device: a CPU run that compiles its codecs' kernels printed it once
per process, each ``bench-train`` rank included, though nothing is wrong. The filter drops exactly that
record, and only while torch sees no CUDA device; every other message of that logger passes.
"""

from __future__ import annotations

import logging

#: The logger torch writes the warning to, and how the warning's text begins.
CPP_EXTENSION_LOGGER = "torch.utils.cpp_extension"
NO_CUDA_RUNTIME = "No CUDA runtime is found"


class NoCudaRuntimeFilter(logging.Filter):
    """Drops the ``No CUDA runtime is found`` record while no CUDA device is available."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith(NO_CUDA_RUNTIME):
            return True
        import torch

        return torch.cuda.is_available()


def quiet_missing_cuda_runtime() -> None:
    """Install :class:`NoCudaRuntimeFilter` on torch's ``cpp_extension`` logger (once per process)."""
    logger = logging.getLogger(CPP_EXTENSION_LOGGER)
    if not any(isinstance(f, NoCudaRuntimeFilter) for f in logger.filters):
        logger.addFilter(NoCudaRuntimeFilter())

"""Shared pytest configuration: deterministic torch, few threads, hypothesis profiles."""

import os

import pytest
import torch
from hypothesis import HealthCheck, settings

torch.set_num_threads(min(2, os.cpu_count() or 1))

settings.register_profile(
    "ci", max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
settings.register_profile("dev", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


def devices():
    """Devices to parametrize over: cpu always, cuda when present (marked so it skips elsewhere)."""
    return ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]

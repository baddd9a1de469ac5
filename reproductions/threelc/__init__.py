"""Reproduction stub: `spec.toml` lists the paper's numbers and claims; the workload is not written yet."""

from pathlib import Path

SPEC_PATH = Path(__file__).with_name("spec.toml")

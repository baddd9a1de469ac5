"""gcbench's asv benchmark suite (``asv.conf.json`` points here); also runnable with pytest-benchmark.

This folder is not installed with the package: asv and pytest import it from the repository.
"""

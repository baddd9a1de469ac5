"""gcbench: reference gradient compressors, distributed execution, and paper reproductions.

The distribution installs the repository's top-level folders as subpackages:
``compressors/`` -> :mod:`gcbench.compressors`, ``envs/`` -> :mod:`gcbench.envs`,
``reproductions/`` -> :mod:`gcbench.reproductions`; this folder holds the glue (CLI, datasets).
"""

__version__ = "0.1.0"

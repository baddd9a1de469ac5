"""gcbench: reference gradient compressors, distributed execution, and paper reproductions.

The distribution installs the repository's top-level folders as subpackages:
``compressors/`` -> :mod:`gcbench.compressors`, ``envs/`` -> :mod:`gcbench.envs`,
``reproductions/`` -> :mod:`gcbench.reproductions`; this folder holds the CLI, its commands and
the data sets (:mod:`gcbench.data`).
"""

__version__ = "0.1.0"

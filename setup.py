"""Package discovery for the folder -> subpackage mapping declared in pyproject.toml.

setuptools cannot discover packages through a ``package-dir`` remapping on its own, so every
package below each mapped folder is listed here (new subpackages are picked up automatically).
"""

from setuptools import find_packages, setup

FOLDERS = {"gcbench": "gcbench", "gcbench.compressors": "compressors", "gcbench.envs": "envs", "gcbench.reproductions": "reproductions"}

packages = []
for prefix, folder in FOLDERS.items():
    packages.append(prefix)
    packages += [f"{prefix}.{sub}" for sub in find_packages(folder)]

setup(packages=packages)

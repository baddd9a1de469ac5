"""Where an experiment runs: pinned dependency sets, DDP hooks, the simulated cluster, network profiles."""

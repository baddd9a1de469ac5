"""Where an experiment runs: pinned dependency sets, DDP hooks, the simulated cluster, network profiles.

* :mod:`.ddp_hook` - ``GCBenchHookState`` + ``gcbench_hook``: any gcbench codec in real DDP.
* :mod:`.aggregation` - the averaging protocols (all_reduce, all_gather, PowerSGD, Sketched-SGD)
  shared by the hook and the simulator.
* :mod:`.simulated` - ``SimulatedCluster``: W logical workers in one process; parameter server.
* :mod:`.launch` - ``launch``: N local ranks with a clear error when one dies or hangs.
* :mod:`.traffic` - ``TrafficLog``: every byte on the wire, per step and worker.
* :mod:`.network` + ``profiles/*.toml`` - the alpha-beta model and the papers' clusters.
* ``requirements-*.txt`` - pinned dependency sets.

Submodules are imported on use (``import gcbench.envs`` stays cheap).
"""

"""Where an experiment runs: pinned dependency sets, DDP hooks, the simulated cluster, network profiles.

* :mod:`.ddp_hook` - ``GCBenchHookState`` + ``gcbench_hook``: any gcbench codec in real DDP.
* :mod:`.simulated` - ``SimulatedCluster``: W logical workers in one process; parameter server.
* :mod:`.aggregator` - ``Aggregator``: averages a bucket of gradients, shared by the hook and the
  simulator; :mod:`.protocols` - how each codec's gradients travel (all_reduce, all_gather, a
  codec's own rounds; the parameter-server topology), one module each, chosen by the codec's
  ``protocol`` declaration; :mod:`.exchange` - what a protocol works with during one call.
* :mod:`.collectives` - ``Collective``: the transport (``LocalCollective``, ``TorchCollective``).
* :mod:`.workers` - ``CodecSpec``, ``WorkerCodecs``: building and seeding each worker's codecs.
* :mod:`.adaptive` - L-GreCo / Accordion policies wired to the hook and the simulator (the
  decision's broadcast, per-layer parameters, the sync-time model).
* :mod:`.launch` - ``launch``: N local ranks with a clear error when one dies or hangs.
* :mod:`.traffic` - ``TrafficLog``: every byte on the wire, per step and worker.
* :mod:`.network` + ``profiles/*.toml`` - the alpha-beta model and the papers' clusters.
* ``requirements-*.txt`` - pinned dependency sets.

Submodules are imported on use (``import gcbench.envs`` stays cheap).
"""

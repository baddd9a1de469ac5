"""``gcbench bench`` and ``gcbench bench-train``: the speed harness, its inputs, peers, rounds, table and targets."""

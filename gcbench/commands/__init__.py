"""The CLI commands' implementations (``gcbench.cli`` only wires options to these functions)."""

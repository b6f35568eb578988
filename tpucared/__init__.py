"""tpucared: keeps fleets of preemptible Cloud TPU VMs alive and working, unattended."""

__version__ = "0.1.0"

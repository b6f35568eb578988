"""The daemon: the reconcile loop, the executor that turns planned actions into cloud calls
and store writes, signals and shutdown. The only layer that wires gcp, store, ssh and core."""

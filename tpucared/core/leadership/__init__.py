"""Leadership: which of several `tpucared run` processes on one database may act (lease.py)."""

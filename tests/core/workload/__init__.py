"""Tests of tpucared/core/workload: the workload planner, attempts, probes, the gang."""

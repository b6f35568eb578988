"""Tests of tpucared/core/nodes: the incarnation tables, slots, multislice, outcomes."""

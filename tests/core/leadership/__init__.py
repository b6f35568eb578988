"""Tests of tpucared/core/leadership: the leader lease rules."""

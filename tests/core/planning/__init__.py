"""Tests of tpucared/core/planning: the planner over whole worlds, the tick, quiet ticks, drift."""

"""Tests of tpucared/core, in folders that mirror its packages (model, nodes, planning, workload,
leadership, notify); test_purity.py checks the whole package. Packages (these __init__.py files)
so that a test module may share its basename with one elsewhere under tests/."""

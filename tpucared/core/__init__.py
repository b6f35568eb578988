"""Pure decisions: specs, observations, records, lifecycles and the planner.

Nothing in this package performs I/O or imports asyncio, aiohttp, asyncssh, SQLAlchemy or
structlog; the import-linter contract in pyproject.toml and tests/core/test_purity.py enforce it.
"""

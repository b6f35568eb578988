"""Tests of tpucared/core/model: backoff arithmetic, durations, the stuck-state table."""

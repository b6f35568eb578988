"""Tests of tpucared/core/notify: what is news, and the webhook rate limits."""

"""Notifications: which facts a person must act on, and when to tell them again.

`spec.py` holds what the `[[notify]]` tables ask for (a webhook, its body format, the kinds
of news it wants, its thresholds). The decisions built on it (what news a tick carries, the
rate limit per webhook and subject) live beside it; the runtime's notifier only sends what
they decide, off the tick.
"""

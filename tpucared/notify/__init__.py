"""Webhooks: posting the news a person must act on, never in the tick's way.

An adapter beside gcp/ssh/store, fed by runtime/notifications.py (which decides, with the
rules of core/notify, what is news and when). `sender.py` owns the HTTP side: a bounded queue
per webhook, one background task posting Slack-compatible or generic JSON bodies, retries
with backoff, and the rule that a webhook's URL (a credential) is never logged.
"""

from tpucared.notify.sender import Webhook, WebhookSender, resolve_webhooks

__all__ = ["Webhook", "WebhookSender", "resolve_webhooks"]

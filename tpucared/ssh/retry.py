"""Per-worker retry policy of the SSH fan-out: how often, how long to wait, on which errors.

Owns `RetryPolicy` and its presets. `fanout.py` asks it after every failed attempt on one
worker. Retries are per worker, with exponential backoff and jitter so a slice's workers do not
reconnect in lock-step (sshd's MaxStartups drops bursts: "kex_exchange_identification:
Connection closed by remote host"). Only failures that happened before the command started
are ever retried; budgets across ticks belong to the planner, not here.

`RetryPolicy` is the adapters' one retry rule (`RetryRule`, core/model/retry.py) in the
fan-out's knobs, with one SSH fact added: a command that started is never run again. The
delays are the daemon's one backoff rule (core/model/backoff.py), centred: each is
`min(max_delay, initial_delay * multiplier**(attempt-1))` scaled by a uniform factor in
[1 - jitter, 1 + jitter], with `u` drawn here from the fan-out's `random.Random`.
"""

from __future__ import annotations

import random

from tpucared.core.model.backoff import in_seconds
from tpucared.core.model.retry import RetryRule
from tpucared.ssh.errors import TRANSIENT_KINDS, SshErrorKind


class RetryPolicy(RetryRule[SshErrorKind]):
    """The one retry rule (core/model/retry.py), spelt in the fan-out's knobs: `attempts`
    tries per worker, delays growing by `multiplier` from `initial_delay` up to `max_delay`,
    each scaled by a uniform factor in [1 - jitter, 1 + jitter]; `retry_on` retried, and
    then only when the command never started."""

    def __init__(
        self,
        attempts: int = 6,  # total tries per worker, the first one included
        initial_delay: float = 1.0,  # seconds before the second try
        multiplier: float = 2.0,
        max_delay: float = 10.0,
        jitter: float = 0.2,  # each delay is scaled by a uniform factor in [1 - jitter, 1 + jitter]
        retry_on: frozenset[SshErrorKind] = TRANSIENT_KINDS,
    ) -> None:
        if attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {attempts}")
        if initial_delay < 0 or max_delay < 0 or multiplier < 1:
            raise ValueError("delays must be >= 0 and multiplier >= 1")
        if not 0 <= jitter < 1:
            raise ValueError(f"jitter must be in [0, 1), got {jitter}")
        super().__init__(
            attempts=attempts,
            waits=in_seconds(
                initial_delay, max_delay, factor=multiplier, jitter=jitter, centred=True
            ),
            retry_on=retry_on,
        )

    def retries(self, kind: SshErrorKind, attempt: int) -> bool:
        # A command that started may have done its work: running it again is not a retry.
        return kind.before_command and super().retries(kind, attempt)

    def should_retry(self, kind: SshErrorKind, attempt: int) -> bool:
        """Whether to try again after `attempt` (1-based) failed with `kind`."""
        return self.retries(kind, attempt)

    def delay(self, attempt: int, rng: random.Random) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based)."""
        return self.waits.delay(attempt, rng.random())


# One try: for per-tick probes, where the next tick is the retry.
NO_RETRY = RetryPolicy(attempts=1)
# Ordinary commands on a node that has been up for a while (~25 s of retrying).
DEFAULT_RETRY = RetryPolicy()
# The first minutes of a node's life: sshd not up yet, ssh-keys metadata still propagating,
# first-boot churn (~3 min of retrying; gcloud does 10 tries 5 s apart).
NEW_NODE_RETRY = RetryPolicy(attempts=16, initial_delay=2.0, max_delay=15.0)

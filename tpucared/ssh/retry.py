"""Per-worker retry policy of the SSH fan-out: how often, how long to wait, on which errors.

Owns `RetryPolicy` and its presets. `fanout.py` asks it after every failed attempt on one
worker. Retries are per worker, with exponential backoff and jitter so a slice's workers do not
reconnect in lock-step (sshd's MaxStartups drops bursts: "kex_exchange_identification:
Connection closed by remote host"). Only failures that happened before the command started
are ever retried; budgets across ticks belong to the planner, not here.

The delays are the daemon's one backoff rule (core/model/backoff.py), centred: each is
`min(max_delay, initial_delay * multiplier**(attempt-1))` scaled by a uniform factor in
[1 - jitter, 1 + jitter], with `u` drawn here from the fan-out's `random.Random`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from tpucared.core.model.backoff import Backoff, in_seconds
from tpucared.ssh.errors import TRANSIENT_KINDS, SshErrorKind


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 6  # total tries per worker, the first one included
    initial_delay: float = 1.0  # seconds before the second try
    multiplier: float = 2.0
    max_delay: float = 10.0
    jitter: float = 0.2  # each delay is scaled by a uniform factor in [1 - jitter, 1 + jitter]
    retry_on: frozenset[SshErrorKind] = TRANSIENT_KINDS

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {self.attempts}")
        if self.initial_delay < 0 or self.max_delay < 0 or self.multiplier < 1:
            raise ValueError("delays must be >= 0 and multiplier >= 1")
        if not 0 <= self.jitter < 1:
            raise ValueError(f"jitter must be in [0, 1), got {self.jitter}")

    def should_retry(self, kind: SshErrorKind, attempt: int) -> bool:
        """Whether to try again after `attempt` (1-based) failed with `kind`."""
        return attempt < self.attempts and kind.before_command and kind in self.retry_on

    @property
    def rule(self) -> Backoff[float]:
        """The backoff between tries: growing by `multiplier`, jittered around its ceiling."""
        return in_seconds(
            self.initial_delay,
            self.max_delay,
            factor=self.multiplier,
            jitter=self.jitter,
            centred=True,
        )

    def delay(self, attempt: int, rng: random.Random) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based)."""
        return self.rule.delay(attempt, rng.random())


# One try: for per-tick probes, where the next tick is the retry.
NO_RETRY = RetryPolicy(attempts=1)
# Ordinary commands on a node that has been up for a while (~25 s of retrying).
DEFAULT_RETRY = RetryPolicy()
# The first minutes of a node's life: sshd not up yet, ssh-keys metadata still propagating,
# first-boot churn (~3 min of retrying; gcloud does 10 tries 5 s apart).
NEW_NODE_RETRY = RetryPolicy(attempts=16, initial_delay=2.0, max_delay=15.0)

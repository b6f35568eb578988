"""The one retry rule of the adapters, and the one reading of a server's Retry-After.

Owns `RetryRule`, what every retry of one request at the daemon's edge decides on: the REST
client's retries of one TPU API call (gcp/retry.py), the SSH fan-out's retries on one worker
(ssh/retry.py) and the webhook sender's retries of one post (notify/sender.py). Each adapter
keeps only its loop (try, ask `pause()`, sleep or give up) and which of its failure kinds are
worth another try; how many tries, how long to wait, what a Retry-After does and how long a
request may go on are decided here, the same way for all three. Budgets across requests (when
to create again) are the planner's, not a rule's.

`retry_after_seconds` reads a Retry-After header, delta-seconds or an HTTP date (RFC 9110
10.2.3), against a `now` the caller reads from its clock: nothing here reads a clock, draws a
random number or sleeps.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Generic, TypeVar

from tpucared.core.model.backoff import Backoff

Kind = TypeVar("Kind", bound=Hashable)

# The HTTP-date forms a recipient must read (RFC 9110 5.6.7), all in GMT: IMF-fixdate, then
# the obsolete RFC 850 and asctime forms. strptime, not email.utils: the core imports no I/O.
_HTTP_DATES = ("%a, %d %b %Y %H:%M:%S GMT", "%A, %d-%b-%y %H:%M:%S GMT", "%a %b %d %H:%M:%S %Y")

Draw = Callable[[], float]  # a number in [0, 1) (random.random); drawn only for a retry


@dataclass(frozen=True)
class RetryRule(Generic[Kind]):
    """Whether to try one request again after a failure, and after how long.

    The wait after the n-th failed try is `waits.delay(n, u)`, u drawn by the caller; a
    Retry-After the server sent is a floor under it (RFC 9110: the client ought to wait that
    long), and one beyond `max_retry_after` ends the retries at once, so that a long wait is
    left to the daemon's loop rather than to a request. `attempts` bounds the tries, `within`
    the time since the first one: no retry starts later than that.
    """

    attempts: int | None  # total tries, the first one included; None: only `within` bounds them
    waits: Backoff[float]  # the wait between tries, in seconds
    retry_on: frozenset[Kind]  # the failure kinds another try may cure
    max_retry_after: float | None = None  # a server asking for longer: give up now
    within: float | None = None  # seconds since the first try in which a retry may start

    def __post_init__(self) -> None:
        if self.attempts is not None and self.attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {self.attempts}")
        if self.attempts is None and self.within is None:
            raise ValueError("a retry rule needs a bound: attempts or within")
        for name in ("max_retry_after", "within"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must not be negative, got {value}")

    def retries(self, kind: Kind, attempt: int) -> bool:
        """Whether a failure of `kind` at try `attempt` (1-based) may be tried again at all."""
        return kind in self.retry_on and (self.attempts is None or attempt < self.attempts)

    def pause(
        self,
        kind: Kind,
        attempt: int,
        draw: Draw,
        *,
        retry_after: float | None = None,
        elapsed: float = 0.0,
    ) -> float | None:
        """Seconds to wait before trying again after try `attempt` failed with `kind`, or None
        to give up now. `draw` is called once, and only when there is a wait to jitter;
        `elapsed` is the time since the first try."""
        if not self.retries(kind, attempt):
            return None
        wait = self.waits.delay(attempt, draw())
        if retry_after is not None:
            if self.max_retry_after is not None and retry_after > self.max_retry_after:
                return None
            wait = max(wait, retry_after)
        if self.within is not None and elapsed + wait > self.within:
            return None
        return wait


def retry_after_seconds(value: str | None, now: datetime) -> float | None:
    """A Retry-After header as seconds from `now`: delta-seconds or an HTTP date, never
    negative; None when absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    for form in _HTTP_DATES:
        try:
            when = datetime.strptime(value, form).replace(tzinfo=UTC)
        except ValueError:
            continue
        return max(0.0, (when - now).total_seconds())
    return None

"""Which replica answers a request, and what happens when one fails: the pure part of the server backend.

- Affinity: requests with the same key (the frames they carry, `cader.evaluate.backends.server.affinity_key`) go
  to the replica that answered the first of them, so the server's prefix cache (same system text and video tokens)
  and encoder cache (same frames) are hit instead of recomputed on another replica.
- Load: a key seen for the first time goes to the replica with the least work in flight (work of a request:
  `request_work`, about its prompt's size), ties to the fewest requests in flight, then the lowest index.
- Capacity: at most `capacity` requests in flight per replica; a request whose replica is full waits for it (its
  caches are there) rather than spilling over.
- Failure: a request that fails on a replica (connection refused or dropped, time-out, 5xx) marks that replica down
  for a back-off that doubles with its consecutive failures up to a cap (`backoff_delay`); the request is retried on
  another replica, at most `retries` times; the keys of a down replica move to the one that takes their next request.
  A replica is tried again once its back-off has passed, and one success clears its failures.

Everything here is bookkeeping on numbers, with the clock passed in, so each rule is tested by hand
(tests/test_server_backend_routing.py); the HTTP calls and the waiting live in the backend.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass


def backoff_delay(failures: int, base_s: float, cap_s: float) -> float:
    """Seconds a replica stays out after its `failures`-th consecutive failure: base * 2^(failures - 1), capped."""
    if failures <= 0:
        return 0.0
    return min(cap_s, base_s * 2.0 ** (failures - 1))


def request_work(n_frames: int, n_images: int, max_new_tokens: int) -> float:
    """A request's share of a replica's work: one for the request, one per frame or image (the encoder's and the
    prefill's work grow with them), one per 16 tokens to generate (decoding steps). A rough, monotone measure: it
    only has to rank replicas by how busy they are."""
    return 1.0 + n_frames + n_images + max_new_tokens / 16.0


@dataclass
class ReplicaState:
    """One replica's bookkeeping."""

    work: float = 0.0        # work of its requests in flight
    requests: int = 0        # its requests in flight
    down_until: float = 0.0  # not chosen before this time (monotonic seconds) after a failure
    failures: int = 0        # consecutive failures (0 after a success)
    sent: int = 0            # requests sent to it
    failed: int = 0          # requests that failed on it

    def up(self, now: float) -> bool:
        return now >= self.down_until


def least_work(states: list[ReplicaState], now: float, exclude: Collection[int] = ()) -> int | None:
    """The up replica (not in `exclude`) with the least work in flight, then fewest requests, then lowest index;
    None when every replica is down or excluded."""
    candidates = [i for i, s in enumerate(states) if i not in exclude and s.up(now)]
    if not candidates:
        return None
    return min(candidates, key=lambda i: (states[i].work, states[i].requests, i))


class Router:
    """Affinity, load and back-off over `n` replicas (module docstring). Not thread-safe: the caller holds a lock."""

    def __init__(self, n: int, capacity: int, backoff_s: float = 1.0, backoff_max_s: float = 30.0):
        if n < 1:
            raise ValueError(f"need at least one replica, got {n}")
        if capacity < 1:
            raise ValueError(f"capacity (requests in flight per replica) must be >= 1, got {capacity}")
        self.states = [ReplicaState() for _ in range(n)]
        self.capacity = int(capacity)
        self.backoff_s, self.backoff_max_s = float(backoff_s), float(backoff_max_s)
        self.home: dict[str, int] = {}  # affinity key -> replica

    def pick(self, key: str, now: float, exclude: Collection[int] = ()) -> int | None:
        """The replica for a request with `key`, or None when it must wait (its replica is full, or every replica
        is down or excluded). `exclude`: replicas this request already failed on (ignored when no other is up)."""
        home = self.home.get(key)
        if home is not None and home not in exclude and self.states[home].up(now):
            return home if self.states[home].requests < self.capacity else None
        choice = least_work(self.states, now, exclude)
        if choice is None and exclude:  # every other replica is down: the failed one may have come back
            choice = least_work(self.states, now)
        if choice is None:
            return None
        self.home[key] = choice  # a new key, or one whose replica failed: it moves here
        return choice if self.states[choice].requests < self.capacity else None

    def start(self, i: int, work: float) -> None:
        """A request of `work` was sent to replica `i`."""
        state = self.states[i]
        state.work += work
        state.requests += 1
        state.sent += 1

    def finish(self, i: int, work: float, ok: bool, now: float) -> None:
        """A request of `work` on replica `i` ended: answered (`ok`), or failed (the replica backs off)."""
        state = self.states[i]
        state.work = max(0.0, state.work - work)
        state.requests -= 1
        if ok:
            state.failures = 0
            return
        state.failures += 1
        state.failed += 1
        state.down_until = max(state.down_until, now + backoff_delay(state.failures, self.backoff_s,
                                                                     self.backoff_max_s))

    def next_up(self, now: float) -> float:
        """Seconds until the first down replica is up again (0 when one is up now)."""
        return max(0.0, min(s.down_until for s in self.states) - now)

    def counts(self) -> list[dict]:
        """Per replica: requests sent and failed (the report's and the tests' accounting)."""
        return [{"sent": s.sent, "failed": s.failed} for s in self.states]

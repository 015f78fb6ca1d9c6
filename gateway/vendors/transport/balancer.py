"""Which of a vendor's deployments serves the next try, and what each answer says of its health.

A `Balancer` holds one `Member` per deployment. The HTTP layer (vendors/transport/http.py) asks it to
`pick` a member for each try, opens a `Ticket` on it (`begin`), and tells the ticket how the try
went: `answered` when a 200 head arrived (a latency sample), `succeeded` when the whole call
went well, `failed` on what a client would see as a failure (a connection failure, a timeout, a
5xx, a 200 that is not an answer, a stream cut short, a call its caller gave up on unanswered:
vendors/transport/answers.py), `rest` on a 429 with Retry-After; `close` releases the member's slot however
the call ended.

Routing (`VendorConfig.routing`), among the members that can take a try now:
- least_outstanding: the fewest calls in flight per unit of weight; ties by weight at random (so
  an idle vendor spreads its traffic by weight too);
- weighted_random: a shuffled deck holding each member in proportion to its weight, dealt one
  card per pick, so the weights hold over every deck's worth of picks, not only on average;
- p2c_ewma: two members at random, the cheaper one taken; the cost is a peak-sensitive moving
  average of latency (decaying towards zero while nothing is measured, as Finagle's PeakEwma
  does, so a member that was slow gets tried again) times calls in flight plus one, over weight.
A member at its `max_concurrent` is skipped.

Passive health (`VendorConfig.health`): `eject_after` consecutive failures take a member out for
a cooling period that doubles with each ejection in a row (up to `max_cooldown`); when it is over,
the member is half-open: one trial call is let through, and its outcome returns the member or
ejects it again for longer. The count of ejections in a row is forgotten once a returned member
has stayed healthy for as long as it was last out. A 429 with Retry-After rests the member for
that long. A vendor with a single deployment is never ejected nor rested: there is nowhere else
to send its calls, and its errors reach the client as they did before (fallbacks apply).

State is per process and read through `snapshot()` (GET /v5/vendors; a metrics layer). Time is
the injected `clock` (seconds, monotonic), randomness the injected `rng`, so tests need no sleeps.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from gateway.core import observe
from gateway.core.config import Deployment, Health, Routing
from gateway.core.errors import VendorNotReady

Clock = Callable[[], float]
State = Literal["healthy", "ejected", "half_open", "resting"]
HEALTHY: State = "healthy"
EJECTED: State = "ejected"
HALF_OPEN: State = "half_open"
RESTING: State = "resting"

# Seconds over which p2c_ewma's latency average forgets (Finagle's and Linkerd's default decay).
EWMA_DECAY = 10.0
# p2c_ewma's cost of a member with calls in flight but no latency measured yet: above any measured
# one, so that one new member does not draw every call before its first answer.
UNMEASURED_COST = 1e6
# Picks in a weighted_random deck: weights are honoured to a share of this many.
DECK_SIZE = 100
# Retry-After of "every deployment is out" when none says when it is back (all busy, a trial
# in flight).
BUSY_RETRY_AFTER = 1


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One deployment's state, as GET /v5/vendors (and a metrics layer) show it."""

    index: int
    name: str  # the configured name, else the index: what the ledger records
    weight: float
    max_concurrent: int | None
    state: State
    in_flight: int
    consecutive_failures: int
    ejections: int  # in a row: the exponent of the next cooling period
    returns_in: float | None  # seconds until an ejected or resting deployment may be tried again
    latency_ewma: float | None  # seconds (p2c_ewma's measure, kept whatever the routing)
    tries: int  # counters since the process started
    failures: int


class Member:
    """One deployment's routing and health state."""

    __slots__ = ("index", "name", "weight", "max_concurrent", "in_flight", "state", "until", "consecutive",
                 "ejections", "cooling", "returned_at", "trial", "ewma", "stamp", "tries", "failures")

    def __init__(self, index: int, deployment: Deployment) -> None:
        self.index = index
        self.name = deployment.name or str(index)
        self.weight = deployment.weight
        self.max_concurrent = deployment.max_concurrent or math.inf
        self.in_flight = 0
        self.state: State = HEALTHY
        self.until = 0.0  # end of the ejection or the rest
        self.consecutive = 0
        self.ejections = 0
        self.cooling = 0.0  # the last cooling period
        self.returned_at = 0.0
        self.trial = False  # a half-open member's trial call is in flight
        self.ewma = 0.0
        self.stamp = 0.0
        self.tries = 0
        self.failures = 0

    def available(self, now: float) -> bool:
        """Whether a try may go to this member now (and, when its time out is over, the move
        from ejected to half-open or from resting to healthy)."""
        if self.in_flight >= self.max_concurrent:
            return False
        state = self.state
        if state is HEALTHY:
            return True
        if now < self.until:
            return False
        if state is RESTING:
            self.state = HEALTHY
            return True
        self.state = HALF_OPEN
        return not self.trial

    def cost(self, now: float) -> float:
        """p2c_ewma's cost: the latency average, decayed to now, times the calls in flight plus one."""
        ewma = self.ewma * math.exp((self.stamp - now) / EWMA_DECAY) if self.ewma else 0.0
        if not ewma:
            return UNMEASURED_COST + self.in_flight if self.in_flight else 0.0
        return ewma * (self.in_flight + 1) / self.weight

    def observe(self, latency: float, now: float) -> None:
        # Peak-sensitive: a slower answer than the average is taken at once, a faster one blended in.
        if latency >= self.ewma:
            self.ewma = latency
        else:
            keep = math.exp((self.stamp - now) / EWMA_DECAY)
            self.ewma = self.ewma * keep + latency * (1 - keep)
        self.stamp = now

    def snapshot(self, now: float) -> Snapshot:
        self.available(now)  # the state as a try would find it
        out = self.state in (EJECTED, RESTING)
        return Snapshot(self.index, self.name, self.weight,
                        None if self.max_concurrent == math.inf else int(self.max_concurrent), self.state,
                        self.in_flight, self.consecutive, self.ejections,
                        max(0.0, self.until - now) if out else None,
                        self.ewma * math.exp((self.stamp - now) / EWMA_DECAY) if self.ewma else None,
                        self.tries, self.failures)


class Ticket:
    """One try on one member, from `Balancer.begin` to `close`."""

    __slots__ = ("_balancer", "member", "_started", "_trial", "_open", "_failed")

    def __init__(self, balancer: Balancer, member: Member, now: float) -> None:
        self._balancer = balancer
        self.member = member
        self._started = now
        self._open = True
        self._failed = False
        # The first try on a half-open member is its trial; the others are kept off it meanwhile.
        self._trial = member.state is HALF_OPEN and not member.trial
        if self._trial:
            member.trial = True
        member.in_flight += 1
        member.tries += 1

    def answered(self) -> None:
        """The response head came, a 200: how long it took is a latency sample."""
        now = self._balancer.clock()
        self.member.observe(now - self._started, now)

    def succeeded(self) -> None:
        """The call went well to its end, or the vendor answered a client's mistake (it is up)."""
        if self._failed:
            return
        member, balancer = self.member, self._balancer
        member.consecutive = 0
        if self._trial and member.state is HALF_OPEN:
            member.state = HEALTHY
            member.returned_at = balancer.clock()
            observe.current().deployment_health(balancer.vendor, member.name, True)
        elif member.ejections and member.state is HEALTHY and balancer.clock() - member.returned_at >= member.cooling:
            member.ejections = 0
        self._end_trial()

    def failed(self) -> None:
        """A connection failure, a timeout, a 5xx, an answer that is not one, a stream cut short,
        or a call given up on before it was answered (before or after the first byte)."""
        if self._failed:
            return
        self._failed = True
        member, balancer = self.member, self._balancer
        member.failures += 1
        if balancer.passive:
            if self._trial and member.state is HALF_OPEN:
                balancer.eject(member)
            elif member.state is HEALTHY:
                member.consecutive += 1
                if member.consecutive >= balancer.health.eject_after:
                    balancer.eject(member)
            # Ejected or resting already: a call begun before says nothing new.
        self._end_trial()

    def rest(self, seconds: float) -> None:
        """The vendor asked this deployment to be left alone for `seconds` (429 with Retry-After)."""
        member, balancer = self.member, self._balancer
        if balancer.passive and seconds > 0:
            until = balancer.clock() + seconds
            if member.state in (HEALTHY, HALF_OPEN, RESTING):
                member.state = RESTING
            member.until = max(member.until, until)
        self._end_trial()

    def close(self) -> None:
        """Release the member's slot; a trial that ended without a verdict lets the next one in
        (so a verdict is given before `close`)."""
        if self._open:
            self._open = False
            self.member.in_flight -= 1
            self._end_trial()

    def _end_trial(self) -> None:
        if self._trial:
            self._trial = False
            self.member.trial = False


class Balancer:
    """A vendor's deployments, their state, and the routing policy that picks among them."""

    def __init__(self, vendor: str, deployments: Sequence[Deployment], routing: Routing = "least_outstanding",
                 health: Health = Health(), clock: Clock = time.monotonic, rng: random.Random | None = None) -> None:
        self.vendor = vendor
        self.members = tuple(Member(i, d) for i, d in enumerate(deployments))
        self.routing = routing
        self.health = health
        self.clock = clock
        self.rng = rng or random.Random()
        self.passive = len(self.members) > 1  # a lone deployment has nowhere else to send its calls
        self._choose = POLICIES[routing]
        self._deck: list[Member] = []
        self._weights = [m.weight for m in self.members]

    def pick(self, avoid: Iterable[Member] = ()) -> Member:
        """The member for the next try: one not in `avoid` (the members already tried) when one
        can take it, else any that can. None can: VendorNotReady, 503 with Retry-After."""
        now = self.clock()
        members = self.members
        if len(members) == 1:
            if members[0].available(now):
                return members[0]
            raise self._unavailable(now)
        ready = [m for m in members if m.available(now)]
        if avoid:
            fresh = [m for m in ready if m not in avoid]
            ready = fresh or ready
        if not ready:
            raise self._unavailable(now)
        return ready[0] if len(ready) == 1 else self._choose(self, ready, now)

    def begin(self, member: Member) -> Ticket:
        return Ticket(self, member, self.clock())

    def eject(self, member: Member) -> None:
        now = self.clock()
        health = self.health
        member.ejections += 1
        member.cooling = min(health.cooldown * 2 ** (member.ejections - 1), health.max_cooldown)
        member.state = EJECTED
        member.until = now + member.cooling
        member.consecutive = 0
        observe.current().deployment_health(self.vendor, member.name, False)

    def snapshot(self) -> list[Snapshot]:
        now = self.clock()
        return [m.snapshot(now) for m in self.members]

    def _unavailable(self, now: float) -> VendorNotReady:
        waits = [m.until - now for m in self.members if m.state in (EJECTED, RESTING) and m.until > now]
        wait = max(1, math.ceil(min(waits))) if waits else BUSY_RETRY_AFTER
        return VendorNotReady(f"vendor '{self.vendor}': every deployment is out (ejected after failures, resting "
                              f"after a rate limit, or at its max_concurrent); retry in {wait} s",
                              code="deployments_unavailable", vendor=self.vendor, retry_after=wait)

    # -- routing policies: (balancer, members that can take a try (two or more), now) -> member ----
    def _least_outstanding(self, ready: list[Member], now: float) -> Member:
        best = math.inf
        tied: list[Member] = []
        for member in ready:
            load = member.in_flight / member.weight
            if load < best:
                best, tied = load, [member]
            elif load == best:
                tied.append(member)
        if len(tied) == 1:
            return tied[0]
        return self.rng.choices(tied, [m.weight for m in tied])[0]

    def _weighted_random(self, ready: list[Member], now: float) -> Member:
        deck = self._deck
        for _ in range(len(deck)):
            card = deck.pop()
            if card in ready:
                return card
        # An empty deck (or only cards of members that cannot take a try): shuffle a new one.
        self._deck = deck = _deck(self.members, self.rng)
        while deck:
            card = deck.pop()
            if card in ready:
                return card
        return self.rng.choices(ready, [m.weight for m in ready])[0]

    def _p2c_ewma(self, ready: list[Member], now: float) -> Member:
        count = len(ready)
        randrange = self.rng.randrange
        first = randrange(count)
        second = randrange(count - 1)
        if second >= first:
            second += 1
        a, b = ready[first], ready[second]
        return a if a.cost(now) <= b.cost(now) else b


def _deck(members: Sequence[Member], rng: random.Random) -> list[Member]:
    """DECK_SIZE cards (about), each member on a share of them as its share of the weight."""
    total = sum(m.weight for m in members)
    deck = [m for m in members for _ in range(max(1, round(m.weight / total * DECK_SIZE)))]
    rng.shuffle(deck)
    return deck


POLICIES: dict[str, Callable[[Balancer, list[Member], float], Member]] = {
    "least_outstanding": Balancer._least_outstanding,
    "weighted_random": Balancer._weighted_random,
    "p2c_ewma": Balancer._p2c_ewma,
}
if set(POLICIES) != set(get_args(Routing)):  # the config's names are the one list; each needs its policy
    raise RuntimeError(f"routing policies {sorted(POLICIES)} differ from config.Routing {get_args(Routing)}")

"""The balancer in-process (gateway/vendors/transport/balancer.py): routing policies, max_concurrent,
ejection, cooling and recovery, the 429 rest, everything out. Time is an injected clock that the
tests move; nothing sleeps."""

from __future__ import annotations

import random
from collections import Counter
from typing import get_args

import pytest

from gateway.core.config import Deployment, Health, Routing
from gateway.core.errors import VendorNotReady
from gateway.vendors.transport.balancer import EJECTED, HALF_OPEN, HEALTHY, POLICIES, RESTING, Balancer
from tests.support.clocks import ManualClock


def deployments(*weights: float, max_concurrent: int | None = None) -> list[Deployment]:
    return [Deployment(base_url=f"http://d{i}", weight=w, max_concurrent=max_concurrent)
            for i, w in enumerate(weights)]


def balancer(*weights: float, routing: Routing = "least_outstanding", clock=None, seed: int = 7,
             health: Health = Health(eject_after=3, cooldown=5, max_cooldown=40), **extra) -> Balancer:
    return Balancer("pool", deployments(*weights, **extra), routing, health, clock or ManualClock(),
                    random.Random(seed))


def fail(b: Balancer, member) -> None:
    ticket = b.begin(member)
    ticket.failed()
    ticket.close()


def succeed(b: Balancer, member) -> None:
    ticket = b.begin(member)
    ticket.answered()
    ticket.succeeded()
    ticket.close()


def state(b: Balancer, index: int):
    return b.snapshot()[index]


def test_every_routing_name_of_the_configuration_has_a_policy():
    assert set(POLICIES) == set(get_args(Routing))


@pytest.mark.parametrize("seed", range(5))
def test_weighted_random_honours_the_weights_within_ten_percent_over_a_thousand(seed):
    b = balancer(1, 2, 1, routing="weighted_random", seed=seed)
    picks = Counter(b.pick().index for _ in range(1000))
    for index, share in ((0, 0.25), (1, 0.5), (2, 0.25)):
        assert abs(picks[index] - 1000 * share) <= 0.1 * 1000 * share, picks


def test_weighted_random_with_uneven_weights():
    b = balancer(0.3, 1.7, 3, routing="weighted_random")
    picks = Counter(b.pick().index for _ in range(1000))
    for index, weight in enumerate((0.3, 1.7, 3)):
        expected = 1000 * weight / 5
        assert abs(picks[index] - expected) <= 0.1 * expected, picks


def test_weighted_random_skips_a_deployment_that_is_out_and_keeps_the_others_ratio():
    b = balancer(1, 1, 2, routing="weighted_random")
    for _ in range(3):
        fail(b, b.members[0])
    assert state(b, 0).state == EJECTED
    picks = Counter(b.pick().index for _ in range(900))
    assert picks[0] == 0 and abs(picks[2] - 600) <= 60, picks


def test_least_outstanding_takes_the_deployment_with_fewest_calls_in_flight():
    b = balancer(1, 1, 1)
    tickets = [b.begin(b.pick()) for _ in range(3)]
    assert sorted(t.member.index for t in tickets) == [0, 1, 2]  # one each before any gets a second
    tickets[0].close()
    assert b.pick() is tickets[0].member


def test_least_outstanding_counts_calls_in_flight_per_unit_of_weight():
    b = balancer(1, 3)
    held = [b.begin(b.pick()) for _ in range(400)]
    counts = Counter(t.member.index for t in held)
    assert counts == {0: 100, 1: 300}


def test_least_outstanding_spreads_an_idle_vendors_traffic_by_weight():
    b = balancer(1, 3)
    picks = Counter(b.pick().index for _ in range(2000))  # nothing in flight: every pick is a tie
    assert abs(picks[1] - 1500) <= 150, picks


def test_p2c_ewma_prefers_the_faster_deployment_and_tries_the_slow_one_again_once_it_is_forgotten():
    clock = ManualClock()
    b = balancer(1, 1, routing="p2c_ewma", clock=clock)
    fast, slow = b.members
    for member, latency in ((fast, 0.01), (slow, 0.5)):
        ticket = b.begin(member)
        clock.advance(latency)
        ticket.answered()
        ticket.succeeded()
        ticket.close()
    assert state(b, 1).latency_ewma == pytest.approx(0.5)
    assert {b.pick().index for _ in range(50)} == {0}
    # Calls in flight count: enough of them on the fast one make the slow one cheaper.
    held = [b.begin(fast) for _ in range(60)]
    assert b.pick() is slow
    for ticket in held:
        ticket.close()
    # Unmeasured for long, both averages decay toward zero at the same rate: still in order...
    clock.advance(60)
    assert b.pick() is fast
    # ...but one slow answer is not held against a deployment for ever: a fast one lowers its average.
    ticket = b.begin(slow)
    clock.advance(0.001)
    ticket.answered()
    ticket.close()
    assert state(b, 1).latency_ewma < 0.01


def test_a_peak_is_taken_at_once_and_a_faster_answer_only_blended_in():
    clock = ManualClock()
    b = balancer(1, 1, routing="p2c_ewma", clock=clock)
    member = b.members[0]
    for latency in (0.1, 0.4):
        ticket = b.begin(member)
        clock.advance(latency)
        ticket.answered()
        ticket.close()
    assert state(b, 0).latency_ewma == pytest.approx(0.4)
    ticket = b.begin(member)
    clock.advance(0.1)
    ticket.answered()
    ticket.close()
    assert 0.1 < state(b, 0).latency_ewma < 0.4


@pytest.mark.parametrize("routing", get_args(Routing))
def test_a_deployment_at_its_max_concurrent_is_skipped(routing):
    b = balancer(1, 1, routing=routing, max_concurrent=2)
    held = [b.begin(b.pick()) for _ in range(4)]
    assert Counter(t.member.index for t in held) == {0: 2, 1: 2}
    with pytest.raises(VendorNotReady) as raised:
        b.pick()
    assert raised.value.code == "deployments_unavailable" and raised.value.retry_after == 1
    held[0].close()
    assert b.pick() is held[0].member


def test_consecutive_failures_eject_for_a_cooling_period_that_doubles():
    clock = ManualClock()
    b = balancer(1, 1, clock=clock)
    bad = b.members[0]
    fail(b, bad)
    fail(b, bad)
    succeed(b, bad)  # a success in between: the failures were not consecutive
    fail(b, bad)
    fail(b, bad)
    assert state(b, 0).state == HEALTHY and state(b, 0).consecutive_failures == 2
    fail(b, bad)
    assert state(b, 0).state == EJECTED and state(b, 0).returns_in == 5
    assert {b.pick().index for _ in range(20)} == {1}
    clock.advance(4.9)
    assert state(b, 0).state == EJECTED
    clock.advance(0.1)
    assert state(b, 0).state == HALF_OPEN
    # Half-open: one trial call, and nobody else meanwhile.
    trial = b.begin(b.pick(avoid=[b.members[1]]))
    assert trial.member is bad
    assert {b.pick().index for _ in range(20)} == {1}
    trial.failed()
    trial.close()
    assert state(b, 0).state == EJECTED and state(b, 0).returns_in == 10 and state(b, 0).ejections == 2
    for cooling in (20, 40, 40):  # doubling, up to max_cooldown
        clock.advance(state(b, 0).returns_in)
        fail(b, b.pick(avoid=[b.members[1]]))
        assert state(b, 0).returns_in == cooling


def test_a_successful_trial_returns_the_deployment_and_a_healthy_spell_forgets_the_ejections():
    clock = ManualClock()
    b = balancer(1, 1, clock=clock)
    bad = b.members[0]
    for _ in range(3):
        fail(b, bad)
    clock.advance(5)
    for _ in range(1):  # a trial fails: out for 10 s
        fail(b, b.pick(avoid=[b.members[1]]))
    clock.advance(10)
    succeed(b, b.pick(avoid=[b.members[1]]))
    assert state(b, 0).state == HEALTHY and state(b, 0).ejections == 2
    assert 0 in {b.pick().index for _ in range(20)}
    # Failing again soon after it returned: out for longer than the first time.
    for _ in range(3):
        fail(b, bad)
    assert state(b, 0).returns_in == 20
    clock.advance(20)
    succeed(b, b.pick(avoid=[b.members[1]]))
    # Healthy for as long as it was last out: the next ejection starts over at `cooldown`.
    clock.advance(20)
    succeed(b, bad)
    assert state(b, 0).ejections == 0
    for _ in range(3):
        fail(b, bad)
    assert state(b, 0).returns_in == 5


def test_a_trial_that_ends_without_a_verdict_lets_the_next_one_in():
    clock = ManualClock()
    b = balancer(1, 1, clock=clock)
    for _ in range(3):
        fail(b, b.members[0])
    clock.advance(5)
    trial = b.begin(b.pick(avoid=[b.members[1]]))
    trial.close()  # the client left
    assert state(b, 0).state == HALF_OPEN
    assert b.pick(avoid=[b.members[1]]) is b.members[0]


def test_failures_of_calls_begun_before_an_ejection_do_not_extend_it():
    clock = ManualClock()
    b = balancer(1, 1, clock=clock)
    bad = b.members[0]
    late = [b.begin(bad) for _ in range(5)]
    for ticket in late[:3]:
        ticket.failed()
    assert state(b, 0).returns_in == 5
    clock.advance(1)
    for ticket in late[3:]:
        ticket.failed()
        ticket.close()
    assert state(b, 0).returns_in == 4 and state(b, 0).ejections == 1


def test_a_429_with_retry_after_rests_the_deployment_that_long():
    clock = ManualClock()
    b = balancer(1, 1, clock=clock)
    ticket = b.begin(b.members[0])
    ticket.rest(30)
    ticket.close()
    assert state(b, 0).state == RESTING and state(b, 0).returns_in == 30
    assert state(b, 0).consecutive_failures == 0 and state(b, 0).ejections == 0  # not a failure
    assert {b.pick().index for _ in range(20)} == {1}
    clock.advance(30)
    assert state(b, 0).state == HEALTHY  # no trial needed: it was never ill


def test_when_every_deployment_is_out_the_503_says_when_the_first_is_back():
    clock = ManualClock()
    b = balancer(1, 1, clock=clock)
    for _ in range(3):
        fail(b, b.members[0])
    clock.advance(2)
    ticket = b.begin(b.members[1])
    ticket.rest(7.5)
    ticket.close()
    with pytest.raises(VendorNotReady) as raised:
        b.pick()
    error = raised.value
    assert (error.status, error.code, error.vendor) == (503, "deployments_unavailable", "pool")
    assert error.retry_after == 3 and error.headers()["retry-after"] == "3"  # the first back: in 3 s
    clock.advance(3)
    assert b.pick() is b.members[0]


def test_a_retry_avoids_the_deployments_tried_unless_none_other_can_take_it():
    b = balancer(1, 1, 1)
    first = b.pick()
    assert all(b.pick(avoid=[first]) is not first for _ in range(20))
    assert b.pick(avoid=list(b.members)) in b.members  # every one tried: any that can take it


def test_a_lone_deployment_is_never_ejected_nor_rested():
    clock = ManualClock()
    b = balancer(1, clock=clock)
    for _ in range(10):
        fail(b, b.members[0])
    ticket = b.begin(b.members[0])
    ticket.rest(30)
    ticket.close()
    assert state(b, 0).state == HEALTHY and state(b, 0).failures == 10
    assert b.pick() is b.members[0]


def test_the_snapshot_is_what_a_metrics_layer_reads():
    clock = ManualClock()
    b = Balancer("pool", [Deployment(base_url="http://a", name="east", max_concurrent=4),
                          Deployment(base_url="http://b", weight=2)], "p2c_ewma", Health(), clock)
    ticket = b.begin(b.members[0])
    clock.advance(0.25)
    ticket.answered()
    east, second = b.snapshot()
    assert (east.name, east.index, east.max_concurrent, east.in_flight, east.tries, east.latency_ewma) == (
        "east", 0, 4, 1, 1, 0.25)
    assert (second.name, second.weight, second.max_concurrent, second.latency_ewma, second.returns_in) == (
        "1", 2.0, None, None, None)

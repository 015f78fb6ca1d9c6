"""A vendor's deployments through the HTTP layer, in-process (httpx.MockTransport answering per
deployment host): each deployment's own key and URL, retries before the first byte on another
deployment, the 429 rest, a refused key, the ledger's record of who served, everything out."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import httpx
import pytest

from gateway.core.endpoint import Endpoint
from gateway.core.completion import CompletionCall
from gateway.core.config import Deployment, Health, Settings, VendorConfig
from gateway.core.errors import GatewayError, RateLimited, VendorFailed, VendorNotReady
from gateway.core.streams import all_of, merged
from gateway.vendors.transport import http as vendor_http
from gateway.vendors import registry
from tests.support.clocks import ManualClock
from tests.support.fakes.httpx_client import answered_by
from tests.support.fakes.openai_upstream import completion, stream_events
from tests.support.fakes.replicas import GARBAGE_ANSWERS, GARBAGE_STREAMS

KEYS = {"a": "sk-deployment-a-secret", "b": "sk-deployment-b-secret", "c": "sk-deployment-c-secret"}
Handler = Callable[[str, httpx.Request], httpx.Response]


def config(routing: str = "least_outstanding", retries: int = 2, **first) -> VendorConfig:
    return VendorConfig(name="pool", protocol="openai", routing=routing, retries=retries,
                        health=Health(eject_after=2, cooldown=5),
                        deployments=tuple(Deployment(base_url=f"http://{host}.test/v1", api_key=key, name=host)
                                          for host, key in KEYS.items()))


def ok(host: str, request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    if body.get("stream"):
        text = "".join(f"data: {data}\n\n" for data in stream_events(body)) + "data: [DONE]\n\n"
        return httpx.Response(200, text=text, headers={"content-type": "text/event-stream"})
    return httpx.Response(200, json=completion(body))


class Vendor:
    """The pool vendor's adapter on a MockTransport; `hosts` lists the host of every try."""

    def __init__(self, handlers: dict[str, Handler], vendor: VendorConfig | None = None) -> None:
        self.hosts: list[str] = []
        self.headers: list[httpx.Headers] = []
        self.clock = ManualClock()
        self.adapter = registry.build(vendor or config(), Settings())
        self.adapter.balancer.clock = self.clock

        def answer(request: httpx.Request) -> httpx.Response:
            host = request.url.host.removesuffix(".test")
            self.hosts.append(host)
            self.headers.append(request.headers)
            return handlers.get(host, ok)(host, request)

        self.adapter.use_clients(answered_by(answer))

    def state(self, name: str):
        return next(s for s in self.adapter.balancer.snapshot() if s.name == name)

    def run(self, stream: bool = False) -> tuple[object, CompletionCall]:
        call = CompletionCall(model="m", prompts=["hello"], max_tokens=2, stream=stream)

        async def go() -> object:
            if stream:
                return [chunk async for chunks in self.adapter.translators[Endpoint.COMPLETIONS].stream(call) for chunk in chunks]
            return await self.adapter.translators[Endpoint.COMPLETIONS].complete(call)

        try:
            return asyncio.run(go()), call
        except GatewayError as exc:
            return exc, call


def failing(status: int, headers: dict[str, str] | None = None, message: str = "down") -> Handler:
    return lambda host, request: httpx.Response(status, json={"error": {"message": message}}, headers=headers)


def unreachable(host: str, request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


@pytest.fixture
def waits(monkeypatch) -> list[float]:
    """The waits the retry policy asks for, recorded instead of spent."""
    recorded: list[float] = []

    async def record(delay: float) -> None:
        recorded.append(delay)

    monkeypatch.setattr(vendor_http, "sleep", record)
    return recorded


def pin_first_pick(vendor: Vendor, host: str) -> None:
    """Make `host` the first pick: a call in flight on every other deployment (least_outstanding
    takes the one with fewest), left open, which changes nothing else of theirs."""
    for member in vendor.adapter.balancer.members:
        if member.name != host:
            vendor.adapter.balancer.begin(member)


def test_each_deployment_gets_its_own_url_and_key():
    vendor = Vendor({})
    for _ in range(30):
        answer, _ = vendor.run()
        assert not isinstance(answer, GatewayError)
    assert set(vendor.hosts) == {"a", "b", "c"}
    for host, headers in zip(vendor.hosts, vendor.headers, strict=True):
        assert headers["authorization"] == f"Bearer {KEYS[host]}"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("fault", ["503", "unreachable"])
def test_a_retry_before_the_first_byte_goes_to_another_deployment_at_once(waits, stream, fault):
    vendor = Vendor({"a": failing(503) if fault == "503" else unreachable})
    pin_first_pick(vendor, "a")
    answer, call = vendor.run(stream)
    assert not isinstance(answer, GatewayError), answer
    assert vendor.hosts[0] == "a" and vendor.hosts[1] in ("b", "c") and len(vendor.hosts) == 2
    assert waits == []  # another deployment: no backoff
    assert call.served_by == [vendor.hosts[1]]
    assert vendor.state("a").consecutive_failures == 1 and vendor.state("a").failures == 1


def test_back_on_a_deployment_already_tried_the_backoff_applies(waits):
    vendor = Vendor({host: failing(503) for host in KEYS},
                    config(retries=4).model_copy(update={"health": Health(eject_after=10)}))
    answer, call = vendor.run()
    assert isinstance(answer, VendorFailed)
    assert sorted(vendor.hosts[:3]) == ["a", "b", "c"] and len(vendor.hosts) == 5
    assert len(waits) == 2  # the first two retries went elsewhere, at once; the next two waited
    assert call.served_by == [vendor.hosts[-1]]  # whose error the client got


def test_a_long_retry_after_rests_the_deployment_and_the_call_goes_elsewhere(waits):
    vendor = Vendor({"a": failing(429, {"retry-after": "30"})})
    pin_first_pick(vendor, "a")
    answer, _ = vendor.run()
    assert not isinstance(answer, GatewayError) and len(vendor.hosts) == 2 and waits == []
    rested = vendor.state("a")
    assert (rested.state, rested.returns_in, rested.consecutive_failures) == ("resting", 30, 0)
    vendor.hosts.clear()
    for _ in range(10):
        vendor.run()
    assert "a" not in vendor.hosts
    vendor.clock.advance(30)
    assert vendor.state("a").state == "healthy"


def test_a_rate_limit_everywhere_goes_back_to_the_client_with_its_retry_after(waits):
    vendor = Vendor({host: failing(429, {"retry-after": "30"}) for host in KEYS})
    answer, _ = vendor.run()
    assert isinstance(answer, RateLimited) and answer.retry_after == 30
    assert sorted(vendor.hosts) == ["a", "b", "c"] and waits == []
    answer, _ = vendor.run()  # all resting now
    assert isinstance(answer, VendorNotReady) and answer.retry_after == 30


def test_a_deployment_refusing_its_key_is_retried_elsewhere_and_counts_as_a_failure(waits):
    vendor = Vendor({"a": failing(401, message=f"bad key {KEYS['a']}")})
    pin_first_pick(vendor, "a")
    answer, _ = vendor.run()
    assert not isinstance(answer, GatewayError) and vendor.hosts[0] == "a" and len(vendor.hosts) == 2
    assert vendor.state("a").consecutive_failures == 1


def test_a_refused_key_is_never_retried_on_the_same_deployment(waits):
    vendor = Vendor({host: failing(403, message=f"key {KEYS[host]} refused") for host in KEYS},
                    config(retries=5))
    answer, _ = vendor.run()
    assert answer.code == "vendor_auth" and sorted(vendor.hosts) == ["a", "b", "c"] and waits == []


def test_a_client_mistake_is_neither_retried_nor_held_against_the_deployment(waits):
    vendor = Vendor({host: failing(400, message="bad prompt") for host in KEYS})
    answer, _ = vendor.run()
    assert answer.status == 400 and len(vendor.hosts) == 1
    assert all(s.failures == 0 and s.state == "healthy" for s in vendor.adapter.balancer.snapshot())


def test_a_timeout_is_retried_only_elsewhere_and_counts_against_the_deployment(waits):
    def slow(host: str, request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    vendor = Vendor({host: slow for host in KEYS}, config(retries=5))
    answer, call = vendor.run()
    # Each deployment asked once, at once: asking one that timed out again would cost as much.
    assert answer.code == "vendor_timeout" and sorted(vendor.hosts) == ["a", "b", "c"] and waits == []
    assert all(vendor.state(host).consecutive_failures == 1 for host in KEYS)
    assert call.served_by == vendor.hosts[-1:]


def test_ejected_deployments_are_skipped_and_when_all_are_out_the_answer_is_a_503(waits):
    vendor = Vendor({"a": unreachable, "b": unreachable, "c": unreachable},
                    config(retries=2))
    for _ in range(2):  # eject_after 2: each call tries all three
        answer, _ = vendor.run()
        assert answer.code == "vendor_unreachable"
    assert {s.state for s in vendor.adapter.balancer.snapshot()} == {"ejected"}
    count = len(vendor.hosts)
    answer, call = vendor.run()
    assert isinstance(answer, VendorNotReady) and answer.code == "deployments_unavailable"
    assert answer.retry_after == 5 and len(vendor.hosts) == count and call.served_by == []


def test_a_vendors_error_text_is_scrubbed_of_every_deployments_key(waits):
    quoted = " ".join(KEYS.values())
    vendor = Vendor({host: failing(500, message=f"keys: {quoted}") for host in KEYS}, config(retries=0))
    answer, _ = vendor.run()
    assert isinstance(answer, VendorFailed)
    assert not any(key in answer.message for key in KEYS.values()), answer.message


def test_a_stream_that_ended_well_is_a_success_and_releases_its_slot():
    clock = ManualClock()

    def answer_in_20_ms(host: str, request: httpx.Request) -> httpx.Response:
        clock.advance(0.02)
        return ok(host, request)

    vendor = Vendor({host: answer_in_20_ms for host in KEYS})
    vendor.adapter.balancer.clock = clock
    for member in vendor.adapter.balancer.members:
        member.consecutive = 1
    answer, call = vendor.run(stream=True)
    assert isinstance(answer, list) and answer
    served = vendor.state(call.served_by[0])
    assert served.in_flight == 0 and served.consecutive_failures == 0
    assert served.latency_ewma == pytest.approx(0.02)  # to the response head


def test_a_stream_broken_after_its_head_counts_as_a_failure():
    def cut(host: str, request: httpx.Request) -> httpx.Response:
        async def body():
            yield b'data: {"choices": [{"index": 0, "text": "x", "finish_reason": null}]}\n\n'
            raise httpx.ReadError("connection reset")

        return httpx.Response(200, content=body(), headers={"content-type": "text/event-stream"})

    vendor = Vendor({host: cut for host in KEYS})
    answer, call = vendor.run(stream=True)
    assert isinstance(answer, VendorFailed)
    served = vendor.state(call.served_by[0])
    assert served.failures == 1 and served.consecutive_failures == 1 and served.in_flight == 0


@pytest.mark.parametrize("stream", [False, True])
def test_after_its_cooling_a_deployment_returns_when_its_trial_call_succeeds(waits, stream):
    broken = {"a": failing(500)}
    vendor = Vendor(broken)
    for _ in range(2):  # eject_after 2
        pin_first_pick(vendor, "a")
        vendor.run(stream)
    assert vendor.state("a").state == "ejected" and vendor.state("a").returns_in == 5
    broken.clear()  # it is mended
    vendor.clock.advance(5)
    assert vendor.state("a").state == "half_open"
    pin_first_pick(vendor, "a")
    answer, call = vendor.run(stream)
    assert not isinstance(answer, GatewayError) and call.served_by == ["a"]
    assert vendor.state("a").state == "healthy" and vendor.state("a").in_flight == 0


def test_a_failed_trial_sends_the_deployment_out_for_twice_as_long(waits):
    vendor = Vendor({"a": failing(500)})
    for _ in range(2):
        pin_first_pick(vendor, "a")
        vendor.run()
    vendor.clock.advance(5)
    pin_first_pick(vendor, "a")
    answer, call = vendor.run()
    assert not isinstance(answer, GatewayError) and call.served_by != ["a"]  # retried elsewhere
    assert vendor.state("a").state == "ejected" and vendor.state("a").returns_in == 10


# -- answers that are not answers: the deployment's failure, tried elsewhere -------------------------
def garbage(content_type: bytes, body: bytes) -> Handler:
    return lambda host, request: httpx.Response(200, content=body, headers={"content-type": content_type.decode()})


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("kind", range(len(GARBAGE_STREAMS)))
def test_a_200_that_is_not_an_answer_is_a_failure_and_tried_elsewhere(waits, stream, kind):
    kinds = GARBAGE_STREAMS if stream else GARBAGE_ANSWERS
    vendor = Vendor({"a": garbage(*kinds[kind % len(kinds)])})
    pin_first_pick(vendor, "a")
    answer, call = vendor.run(stream)
    assert not isinstance(answer, GatewayError), answer
    assert vendor.hosts[0] == "a" and len(vendor.hosts) == 2 and call.served_by == vendor.hosts[1:]
    assert vendor.state("a").failures == 1 and vendor.state("a").in_flight == 0 and waits == []


def test_a_stream_cut_short_after_its_start_is_a_failure():
    def cut(host: str, request: httpx.Request) -> httpx.Response:
        first = b'data: {"choices": [{"index": 0, "text": "x", "finish_reason": null}]}\n\n'
        return httpx.Response(200, content=first, headers={"content-type": "text/event-stream"})  # no [DONE]

    vendor = Vendor({host: cut for host in KEYS})
    answer, call = vendor.run(stream=True)
    assert isinstance(answer, VendorFailed) and "ended the stream early" in answer.message
    assert len(vendor.hosts) == 1  # it had started: nothing is tried again
    assert vendor.state(call.served_by[0]).failures == 1


def test_a_stream_its_reader_stops_early_is_not_held_against_the_deployment():
    vendor = Vendor({})
    call = CompletionCall(model="m", prompts=["hello"], max_tokens=2, stream=True)

    async def first_chunks_only() -> None:
        chunks = vendor.adapter.translators[Endpoint.COMPLETIONS].stream(call)
        await anext(chunks)
        await chunks.aclose()  # a stop sequence matched, or the client left

    asyncio.run(first_chunks_only())
    served = vendor.state(call.served_by[0])
    assert served.failures == 0 and served.in_flight == 0


@pytest.mark.parametrize("stream", [False, True])
def test_a_call_its_caller_gives_up_on_unanswered_is_a_failure(stream):
    reached = asyncio.Event()

    async def never(host: str, request: httpx.Request) -> httpx.Response:
        reached.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    vendor = Vendor({host: never for host in KEYS})
    call = CompletionCall(model="m", prompts=["hello"], max_tokens=2, stream=stream)

    async def give_up() -> None:
        work = vendor.adapter.translators[Endpoint.COMPLETIONS].stream(call).__anext__() if stream else vendor.adapter.translators[Endpoint.COMPLETIONS].complete(call)
        task = asyncio.ensure_future(work)
        await reached.wait()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(give_up())
    (host,) = vendor.hosts
    assert vendor.state(host).failures == 1 and vendor.state(host).in_flight == 0


@pytest.mark.parametrize("stream", [False, True])
def test_a_call_the_gateway_abandons_because_another_failed_is_not_held_against_its_deployment(stream):
    """One request fanned out: one call refused at once (a client's mistake), the others waiting
    on a deployment that has not answered yet. Abandoning them is not their deployment's fault."""
    waiting = asyncio.Event()

    async def later(host: str, request: httpx.Request) -> httpx.Response:
        waiting.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def refused(host: str, request: httpx.Request) -> httpx.Response:
        await waiting.wait()  # refused once the other call is on its way
        return failing(400, message="bad prompt")(host, request)

    one_at_a_time = config().deployments[0].model_copy(update={"max_concurrent": 1})
    vendor = Vendor({"a": refused, "b": later, "c": later},
                    config().model_copy(update={"deployments": (one_at_a_time, *config().deployments[1:])}))
    pin_first_pick(vendor, "a")  # the first call goes to a, the other (a is full) elsewhere
    calls = [CompletionCall(model="m", prompts=["hello"], max_tokens=2, stream=stream) for _ in range(2)]

    async def fan_out() -> None:
        if stream:
            async for _ in merged([vendor.adapter.translators[Endpoint.COMPLETIONS].stream(call) for call in calls]):
                pass
        else:
            await all_of([vendor.adapter.translators[Endpoint.COMPLETIONS].complete(call) for call in calls])

    with pytest.raises(GatewayError) as refusal:
        asyncio.run(fan_out())
    assert refusal.value.status == 400 and vendor.hosts[0] == "a" and len(vendor.hosts) == 2
    assert all(s.failures == 0 and s.in_flight <= 1 for s in vendor.adapter.balancer.snapshot())

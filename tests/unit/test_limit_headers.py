"""The x-ratelimit-* headers of a grant (gateway/limits/on_request.py): per kind, the tightest per-minute
window of the key's and the account's (the fewest remaining, then the lowest limit), in OpenAI's
names and formats; none without a per-minute limit."""

from __future__ import annotations

from gateway.limits.counters import RPM, TPM, window
from gateway.limits.on_request import duration, headers
from gateway.limits.rules import ACCOUNT, KEY, Subject
from gateway.limits.verdicts import Grant

KEY_A, ACCT = Subject(KEY, "key_a"), Subject(ACCOUNT, "acct")


def test_each_kind_tells_its_tightest_window():
    grant = Grant(windows={(KEY_A, RPM): window(100, 90.0), (KEY_A, TPM): window(1000, 400.0),
                           (ACCT, RPM): window(50, 10.0), (ACCT, TPM): window(5000, 4000.0)})
    assert headers(grant) == {
        "x-ratelimit-limit-requests": "50", "x-ratelimit-remaining-requests": "10",
        "x-ratelimit-reset-requests": duration(window(50, 10.0).reset),
        "x-ratelimit-limit-tokens": "1000", "x-ratelimit-remaining-tokens": "400",
        "x-ratelimit-reset-tokens": duration(window(1000, 400.0).reset),
    }
    assert headers(grant)["x-ratelimit-reset-requests"] == "48s"  # 40 of 50 to refill at 50 a minute


def test_equal_remaining_tells_the_lower_limit_and_a_kind_without_a_window_is_left_out():
    grant = Grant(windows={(KEY_A, RPM): window(100, 5.0), (ACCT, RPM): window(20, 5.0)})
    assert headers(grant) == {"x-ratelimit-limit-requests": "20", "x-ratelimit-remaining-requests": "5",
                              "x-ratelimit-reset-requests": "45s"}
    assert headers(Grant()) == {}

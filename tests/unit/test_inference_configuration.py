"""`inference_configuration` (gateway/endpoints/inference/configuration.py): the client's retries
and timeout are honoured up to the vendor's configured ones, and refused beyond, never clamped."""

from __future__ import annotations

import pytest

from gateway.core.errors import ParameterOutOfRange
from gateway.core.vendor_config import Timeouts, VendorConfig
from gateway.endpoints.inference.configuration import call_settings

VENDOR = VendorConfig(name="acme", protocol="anthropic", base_url="http://127.0.0.1:1", retries=2,
                      timeouts=Timeouts(first_byte=30, idle=20, total=120))


def test_without_a_configuration_the_vendors_own_settings_apply():
    settings = call_settings(VENDOR)
    assert (settings.retries, settings.timeouts) == (2, VENDOR.timeouts)


def test_fewer_retries_and_a_shorter_call_are_honoured_and_bound_the_waits_inside_it():
    settings = call_settings(VENDOR, num_retries=0, timeout_seconds=10)
    assert settings.retries == 0
    assert (settings.timeouts.total, settings.timeouts.first_byte, settings.timeouts.idle) == (10, 10, 10)
    assert settings.timeouts.connect == VENDOR.timeouts.connect
    assert call_settings(VENDOR, timeout_seconds=25).timeouts.first_byte == 25
    assert call_settings(VENDOR, timeout_seconds=120).timeouts == VENDOR.timeouts


@pytest.mark.parametrize(("asked", "param"), [({"num_retries": 3}, "inference_configuration.num_retries"),
                                              ({"timeout_seconds": 121}, "inference_configuration.timeout_seconds")])
def test_more_than_the_vendor_allows_is_a_400_naming_it(asked, param):
    with pytest.raises(ParameterOutOfRange) as caught:
        call_settings(VENDOR, **asked)
    assert (caught.value.status, caught.value.param, caught.value.vendor) == (400, param, "acme")
    assert "configured" in caught.value.message

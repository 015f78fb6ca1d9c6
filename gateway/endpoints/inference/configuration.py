"""`inference_configuration`: the client's retries and timeout, honoured within the operator's.

The operator configures each vendor's retries and timeouts (gateway/core/vendor_config.py); a
client may ask for fewer retries or a shorter call, never more: a value beyond the vendor's is a 400
naming it (`parameter_out_of_range`), not clamped, so a client never believes it has a budget of
time or tries it does not have. The contract bounds both already (0-10 retries, 1-3600 seconds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.core.errors import ParameterOutOfRange
from gateway.core.vendor_config import Timeouts, VendorConfig


@dataclass(frozen=True, slots=True)
class CallSettings:
    retries: int
    timeouts: Timeouts


def call_settings(vendor: VendorConfig, num_retries: Any = None, timeout_seconds: Any = None) -> CallSettings:
    """The retries and timeouts of this request's vendor calls: the vendor's, or the client's where
    it asked for less. `timeout_seconds` bounds the whole call (`total`), and with it the waits
    inside it (a first byte, a gap between events) that were longer."""
    retries = vendor.retries
    if num_retries is not None:
        if not 0 <= num_retries <= vendor.retries:
            raise ParameterOutOfRange("inference_configuration.num_retries", vendor.name, num_retries,
                                      f"0 to {vendor.retries} (its configured retries)")
        retries = num_retries
    timeouts = vendor.timeouts
    if timeout_seconds is not None:
        if not 0 < timeout_seconds <= timeouts.total:
            raise ParameterOutOfRange("inference_configuration.timeout_seconds", vendor.name, timeout_seconds,
                                      f"1 to {timeouts.total:g} seconds (its configured total timeout)")
        total = float(timeout_seconds)
        timeouts = timeouts.model_copy(update={"total": total, "first_byte": min(timeouts.first_byte, total),
                                               "idle": min(timeouts.idle, total)})
    return CallSettings(retries, timeouts)

"""A gateway's /metrics, scraped and read sample by sample."""

from __future__ import annotations

import httpx

from tests.support.environments import SHARED_TLS


def scrape(url: str, **headers: str) -> dict[tuple[str, frozenset], float]:
    """A gateway's GET /metrics as {(sample name, its labels as a set of pairs): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    response = httpx.get(f"{url}/metrics", headers=headers, timeout=10, verify=SHARED_TLS)
    assert response.status_code == 200, response.text
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(response.text) for sample in family.samples}


def metric(samples: dict[tuple[str, frozenset], float], name: str, **labels: str) -> float:
    """The value of one sample (0 when it has none yet)."""
    return samples.get((name, frozenset(labels.items())), 0.0)

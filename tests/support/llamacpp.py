"""llama.cpp's server (xllamacpp) with the packaged model, run in this process, built with the
local vendor's own engine settings."""

from __future__ import annotations

import gc
import math

import httpx
import xllamacpp

from gateway.vendors.local.engine import EngineOptions, engine_params
from gateway.vendors.local.model import PACKAGED_NAME, packaged_model


class EngineServer:
    def __init__(self, parallel: int, context_size: int, threads: int | None = None) -> None:
        options = EngineOptions(model_path=str(packaged_model()), alias=PACKAGED_NAME, parallel=parallel,
                                context_size=context_size, threads=threads, quiet=True)
        self.server = xllamacpp.Server(engine_params(options))
        self.url = self.server.listening_address
        self.http = httpx.Client(base_url=self.url, timeout=60)
        self.vocab_size = self.http.get("/v1/models").json()["data"][0]["meta"]["n_vocab"]

    def tokenize(self, text: str) -> list[int]:
        return self.http.post("/tokenize", json={"content": text, "parse_special": True}).json()["tokens"]

    def complete(self, body: dict) -> dict:
        answer = self.server.handle_completions(body)
        assert "error" not in answer, answer
        return answer

    def over_http(self, body: dict) -> dict:
        """`body` posted to its /v1/completions as any client would (a connection of its own: the
        server closes one after a stream although it announced keep-alive)."""
        r = httpx.post(f"{self.url}/v1/completions", json={"model": "m", **body}, timeout=120)
        assert r.status_code == 200, r.text
        return r.json()

    def next_token_logprob(self, prefix: list[int], token: int) -> float:
        """log P(token | prefix), read from the model's whole next-token distribution. The comma is
        forced (the reported distribution is the unbiased one) because llama.cpp reports nothing
        for a sampled token that is only part of a character."""
        comma = self.tokenize(",")[0]
        answer = self.complete({"prompt": prefix, "max_tokens": 1, "temperature": 0, "n_probs": self.vocab_size,
                                "logit_bias": {str(comma): 100}})
        ranked = answer["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
        found = [t["logprob"] for t in ranked if t["id"] == token]
        assert len(found) == 1 and math.isfinite(found[0])
        return found[0]

    def close(self) -> None:
        self.http.close()
        del self.server  # the destructor stops the engine and its HTTP server
        gc.collect()

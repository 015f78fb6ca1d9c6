"""POST /v5/inference: vendor-native payloads under the gateway's keys, limits and ledger.

The client's `args` is the body of the vendor's own API. What the gateway needs to know about it,
per protocol, is data (`wires.NativeWire`): where the model goes, which flag asks for a stream,
which member bounds the output, where usage is reported. Every rule reads that data:

- guard.py: `args` names no URL, path, header, key or deployment; the model is the routed one;
  the body the vendor gets (`prepare`).
- bounds.py: the output bound a token budget reserves, or the 400 naming the field to set.
- usage.py: the vendor's own counts, plain and streamed, checked as untrusted; "not reported"
  where absent, so the gateway estimates and flags it.
- texts.py: the text the gateway counts when the vendor reports nothing.
- configuration.py: `inference_configuration`'s retries and timeout, within the vendor's.
- answers.py: the `generic_inference` answer and a stream's `generic_inference.chunk` events, read
  from the vendor's and checked (JSON, depth, the vendor's own end, its error events).

All pure: the vendor translators send, the planner plans (docs/inference.md).
"""

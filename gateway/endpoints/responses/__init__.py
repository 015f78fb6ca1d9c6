"""POST /v5/responses, OpenAI's Responses API, as pure functions on the contract's wire dicts, so
that they hold whatever the core's own types become (docs/responses.md).

- `request.py`: a Responses request, and the stored conversation it continues, to the input items
  it keeps and to an OpenAI chat-completions request body (the bridge for every vendor that has
  chat and no Responses API); what cannot be served is refused by name (`Refused`).
- `answer.py`: the `response` object: its shell (what it echoes of the request), its ids, and a chat
  completion's answer shaped into it.
- `stream.py`: chat completion chunks in, OpenAI's Responses events out, ending with exactly one
  terminal event that carries the whole response and its usage.
- `native.py`: the same for a vendor that has the Responses API itself (OpenAI): the request sent
  statelessly (`store: false`, the whole conversation), its answer and events kept to the contract.
"""

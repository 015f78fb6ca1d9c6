"""The `http` protocol: any self-hosted model server's own JSON API (TGI's `/generate`, llama.cpp's
`/completion`, Triton's or KServe's generate endpoints...), served through POST /v5/inference with
the client's `args` as the body.

The server's API is not known to the gateway, so the operator says what it needs to know, as the
vendor's options (`options.HttpServerOptions`): the path, the header that carries the key, how a
stream is asked for and framed, and where the server reports tokens (JSON pointers, pointer.py).
`wire.py` builds the request and reads the answers from them, purely; adapter.py is the protocol's
adapter (its line in vendors/registry.py), inference.py its one translator. A stream is read as
server-sent events (`stream_format = "json_lines"` is refused as the configuration loads, for now).
"""

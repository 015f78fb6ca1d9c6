"""One module per vendor wire protocol, what they share (HTTP, SSE reading, logprobs), and the
registry of protocols. Imports core only."""

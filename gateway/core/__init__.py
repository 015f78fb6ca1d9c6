"""The kernel every layer may import: errors, the vendor call/result types, the request parameters
and their support records, settings, redaction, stream merging. Imports nothing of ours but the
generated models."""

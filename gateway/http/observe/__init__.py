"""What the gateway tells its operators about the requests it serves: Prometheus metrics
(metrics.py), OpenTelemetry traces (tracing.py), logs (logs.py: text or JSON; log_stream.py: access
lines written together), and the layer that counts, traces and logs each request
(observability.py)."""

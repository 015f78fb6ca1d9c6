"""One unit per endpoint of the v5 inference family (completions/, chat/): what makes the endpoint
itself, over the shared core below it. A unit is one object, `UNIT` in its package's unit.py,
which the request's way (http/serving.py `serve`) is parameterised by (unit.py `EndpointUnit`):
its request rules, its plan (the one planner, given the endpoint's calls), its demand on the
limits, its cache form, and its answer, whole or streamed."""

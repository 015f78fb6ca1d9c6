"""POST /v5/chat/completions: OpenAI's chat completions, as one unit (unit.py `UNIT`) over the
shared way (http/serving.py): its rules beyond the schema (rules.py), its plan (plan.py),
its demand and cache form (unit.py), its answer (answer.py)."""

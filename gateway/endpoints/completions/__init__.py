"""POST /v5/completions: the legacy text completions of OpenAI's contract, as one unit (unit.py
`UNIT`) over the shared way (http/serving.py)."""

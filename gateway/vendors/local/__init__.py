"""The embedded model: its engine (llama.cpp in process), the packaged weights, and one translator
per endpoint it serves."""

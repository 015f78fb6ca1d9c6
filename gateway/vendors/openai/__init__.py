"""The OpenAI wire protocol, and every OpenAI-compatible server's (vLLM, llama.cpp, SGLang, Ollama):
its shared wire parts and one translator per endpoint it serves."""

"""Anthropic's Messages API: its shared wire parts and one translator per endpoint it serves."""

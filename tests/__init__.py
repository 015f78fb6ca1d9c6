"""The gateway tests."""

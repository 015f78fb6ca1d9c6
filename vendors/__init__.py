"""Vendor adapters, one module per wire protocol, and the registry that picks one by name."""

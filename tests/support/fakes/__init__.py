"""Fake vendors: real HTTP servers on loopback speaking each vendor's wire format."""

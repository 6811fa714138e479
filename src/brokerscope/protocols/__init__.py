"""One decoder package per protocol; base.py holds the contract and the registry."""

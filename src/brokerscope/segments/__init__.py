"""On-disk segment readers."""

"""TODO map."""

"""The hook kinds. Each module implements one kind's rules on top of Host.call."""

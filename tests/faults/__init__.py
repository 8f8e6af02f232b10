"""Stand-ins and helper processes for the fault-injection, read-only, secrets and hostile tests."""

"""Unit tests for statekeeper.stores (no broker needed)."""

"""Test helpers shared across the project: local stand-ins for external services, loopback only."""

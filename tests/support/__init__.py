"""The test helpers every test area shares: building events and objects, waiting for a condition, stacks."""

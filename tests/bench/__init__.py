"""The bench suites' own analysis, tested without a stack."""

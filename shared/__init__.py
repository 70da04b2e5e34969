"""tenon."""

"""A small CPU trainer for 2-D classification toys (spirals), driven by a JSON config."""

"""A small image classifier trainer. Run it with ``python -m trainer``."""

__version__ = "0.3.1"

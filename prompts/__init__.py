"""Prompt templates, one per agent role, versioned with the code (see load())."""

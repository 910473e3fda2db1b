"""Deterministic tools: the rule catalogue, scanner, report writers (and, later,
codemods and AST edit primitives). Nothing here knows about agents or LLMs."""

__version__ = "0.1.0"

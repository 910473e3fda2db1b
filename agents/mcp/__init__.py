"""``torchport mcp``: torchport as a Model Context Protocol server for coding agents.

A thin layer over what the CLI and chat already call: the scanner, the planner,
chat's proposal and apply code, the verifier and the sandbox harness. One module a job:
``confine`` (every path a tool takes stays inside the repository), ``jobs`` and
``worker`` (long calls in a child process, with progress and cancellation),
``worktree`` (the original of a working tree), ``session`` (the server's proposals and
last report, and apply), ``tools`` and ``resources`` (what a client sees), ``server``
(the MCP SDK's server and its transports).
"""

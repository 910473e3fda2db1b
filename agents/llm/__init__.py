"""The LLM side of the agents: client, tool loop, embedded local model."""

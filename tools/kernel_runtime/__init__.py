"""Runtimes that torchport ships inside a port, for kernels the target cannot compile.

``triton_on_torch`` is copied verbatim into a port (it imports nothing of torchport);
``support`` is torchport's static check of what it covers.
"""

"""The ``torchport`` command line: one module per front door (``torchport scan``,
``migrate``, ``batch``, ``eval``, ``chat``, ``doctor``, ``run``, ``rules``), the options
they share, and ``main``, the composition root. Nothing below imports this package."""

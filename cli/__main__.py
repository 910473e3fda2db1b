"""``python -m torchport.cli``: the ``torchport`` command."""

import sys

from .main import main

sys.exit(main())

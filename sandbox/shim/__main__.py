"""Entry point of `python -m torchport.sandbox.shim`; see launcher.py."""

import sys

from .launcher import main

if __name__ == "__main__":
    sys.exit(main())

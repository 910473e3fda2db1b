"""Superseded: the C++ backend measured here is now the product's native emulator
(sandbox/native/), and benchmarks/emulator_overhead.py measures it next to
the Python emulator and plain CPU in one run. This entry point forwards there so that
existing commands keep working. Usage:
    python benchmarks/cpp_backend/bench.py [--repeats 3] [--steps 30]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import emulator_overhead

if __name__ == "__main__":
    emulator_overhead.main()

"""Moved: stoixlite/benchmark/peers/sb3_recurrent_ppo.py (this wrapper runs it, as a file, in a
Python that need not have stoixlite; it goes in the next release)."""

import runpy
import sys
from pathlib import Path

if __name__ == "__main__":
    worker = Path(__file__).resolve().parents[1] / "stoixlite/benchmark/peers/sb3_recurrent_ppo.py"
    print(f"scripts/sb3_recurrent_ppo.py has moved: {worker}", file=sys.stderr)
    runpy.run_path(str(worker), run_name="__main__")

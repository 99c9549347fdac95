#!/usr/bin/env python3
"""`python -m ptxgemm swizzle-probe`, kept at its old path (the code lives in the package)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # a plain checkout runs without pip install too
from ptxgemm.__main__ import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["swizzle-probe", *sys.argv[1:]]))

#!/usr/bin/env python3
"""`python -m ptxgemm.tools.bank_probe`, kept at its old path: the bank-conflict model's ncu check lives in the package."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # a plain checkout runs without pip install too
from ptxgemm.tools.bank_probe import main

if __name__ == "__main__":
    sys.exit(main())

"""`python -m ptxgemm <command>`: see ptxgemm/cli/main.py."""
import sys

from .cli.main import main

if __name__ == "__main__":
    sys.exit(main())

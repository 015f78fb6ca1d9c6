"""`python -m gateway`: the `gateway` command (gateway/cli.py)."""

import sys

from gateway.cli import main

sys.exit(main())

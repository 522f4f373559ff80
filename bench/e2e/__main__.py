"""``python -m bench.e2e [options]``: the same as ``acp-fast bench [options]``."""

from __future__ import annotations

import sys

from acp_fast.cli.bench import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

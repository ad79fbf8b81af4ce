"""``python -m shardgnn``: the ``shardgnn`` command line."""

import sys

from shardgnn.cli import main

sys.exit(main())

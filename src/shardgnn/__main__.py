"""``python -m shardgnn``: the ``shardgnn`` command line."""

from shardgnn.cli import cli

cli()

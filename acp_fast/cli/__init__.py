"""The ``acp-fast`` command line (``acp_fast.cli.main:main``).

Subcommands: ``testy`` (the deterministic test agent, :mod:`acp_fast.cli.testy`),
``version``, and ``bench`` when :mod:`acp_fast.cli.bench` is present (it registers itself
through its ``add_parser(subparsers)``).
"""

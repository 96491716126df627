"""cleanerd's test suite: a folder of tests per package of ``cleanerd/`` (``tests/format/`` for
``cleanerd/format/``, ...), cross-cutting ones in ``project/``, ``deploy/`` and ``e2e/``, and the
helpers they share in ``support/`` (``from tests.support.<module> import name``)."""

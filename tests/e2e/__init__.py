"""``cleanerd run`` as a real process (``test_daemon_*.py``, marked ``e2e``), and the harness's
own tests (``test_harness.py``)."""

"""The daemon and its asyncio code: workers, budget, maintenance, HTTP, metrics, systemd, logs.

What to clean next and each partition's state live in the synchronous ``scheduling`` package.
"""

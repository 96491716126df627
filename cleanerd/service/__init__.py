"""The daemon: the only asyncio code. Manager, workers, budget, HTTP, metrics, systemd, logs."""

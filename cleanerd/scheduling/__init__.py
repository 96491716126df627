"""Kafka's LogCleanerManager, synchronous: states, survey, metadata cache, ranking, grab, sizing.

No asyncio here: the daemon (service/) runs ``CleanerManager.scan`` in a thread and calls the
rest from its event loop; the tests drive it with a fake clock and no loop at all.
"""

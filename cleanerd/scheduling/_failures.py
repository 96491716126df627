"""A partition's failures: the retry rule, and where an error happened.

A cleaning that fails and a survey that cannot read a partition are the same kind of event for
the operator: each is logged with the partition, the file and byte position when the error
names them, counted (``failures`` in ``/status``, ``cleanerd_failures_total``) and retried after
a backoff that doubles up to a cap; past ``cleanerd.retry.attempts`` retries the partition is
uncleanable until its files change, its topic's settings change (the manager's
``_settings_changed``) or an admin resumes it. Nothing of it is written down: a restart forgets
it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from cleanerd.logger import get_logger
from cleanerd.scheduling._state import PartitionStatus
from cleanerd.storage import TopicPartition

log = get_logger("cleanerd.manager")


@dataclass(frozen=True)
class RetryPolicy:
    """``cleanerd.retry.attempts``, ``cleanerd.retry.backoff.ms``, ``...backoff.max.ms``."""

    attempts: int = 3
    backoff_ms: int = 1_000
    backoff_max_ms: int = 60_000

    def wait_ms(self, failures: int) -> int:
        """The wait after the ``failures``-th consecutive failure: doubling, capped."""
        return max(min(self.backoff_ms << max(failures - 1, 0), self.backoff_max_ms), 0)


def record_failure(st: PartitionStatus, error: str, policy: RetryPolicy, now_ms: int) -> bool:
    """Count one failed attempt on ``st``; True when it was the last retry (uncleanable now)."""
    st.failures += 1
    st.last_error = error
    if st.failures > policy.attempts:
        st.retry_at_ms = None
        return True
    st.retry_at_ms = now_ms + policy.wait_ms(st.failures)
    return False


def locate(error: BaseException) -> tuple[str | None, int | None]:
    """(file, byte position) an error names: a corrupt batch carries both, an OS error its
    file; others name them in their message only."""
    path = getattr(error, "path", None)
    if path is None:
        path = getattr(error, "filename", None)
    position = getattr(error, "position", None)
    file = os.fsdecode(path) if isinstance(path, str | bytes | os.PathLike) else None
    return file, position if isinstance(position, int) else None


def outcome_fields(st: PartitionStatus, gave_up: bool, now_ms: int) -> dict[str, Any]:
    """The log fields saying what happens next: a retry (when) or the uncleanable mark."""
    fields: dict[str, Any] = {"failures": st.failures}
    if gave_up:
        fields["uncleanable"] = True
    elif st.retry_at_ms is not None:
        fields["retry_in_ms"] = max(st.retry_at_ms - now_ms, 0)
    return fields


class FailureBook:
    """The manager's record of failing partitions, and the uncleanable rule over it.

    A partition is uncleanable when its retries ran out, in a cleaning or in surveys, and stays
    so until its files change (the fingerprint of the survey after the last failure), a survey
    reads it again (for survey failures), or ``resume`` (an admin's, or a change of its topic's
    settings).
    """

    def __init__(self, retry: RetryPolicy) -> None:
        self.retry = retry
        self.unreadable: set[TopicPartition] = set()  # the last survey could not read it
        self._read_given_up: dict[TopicPartition, int] = {}  # fingerprint when retries ran out
        self._clean_given_up: dict[TopicPartition, int | None] = {}  # None: not surveyed since

    def uncleanable(self, tp: TopicPartition) -> bool:
        return tp in self._read_given_up or tp in self._clean_given_up

    def read_failed(
        self,
        st: PartitionStatus,
        error: str,
        fingerprint: int,
        now_ms: int,
        *,
        file: str | None = None,
        position: int | None = None,
    ) -> bool:
        """A survey could not read ``st``'s partition: one failed attempt (logged; True), unless
        it is backing off or its retries ran out on these same files (False)."""
        tp = st.tp
        self.unreadable.add(tp)
        given_up = self._read_given_up.get(tp)
        if given_up == fingerprint:
            return False
        if given_up is not None:  # changed files, still unreadable: a new round of retries
            del self._read_given_up[tp]
            st.failures, st.retry_at_ms = 0, None
        elif st.retry_at_ms is not None and st.retry_at_ms > now_ms:
            return False
        gave_up = record_failure(st, error, self.retry, now_ms)
        if gave_up:
            self._read_given_up[tp] = fingerprint
        log.error(
            "partition survey failed",
            partition=str(tp),
            directory=str(st.directory),
            file=file,
            position=position,
            error=error,
            **outcome_fields(st, gave_up, now_ms),
        )
        return True

    def read_ok(self, st: PartitionStatus, fingerprint: int) -> None:
        """A survey read ``st``'s partition: survey failures end; a cleaning's uncleanable mark
        ends when the files differ from those the failure left."""
        tp = st.tp
        if tp in self.unreadable:
            self.unreadable.discard(tp)
            self._read_given_up.pop(tp, None)
            if tp not in self._clean_given_up:
                st.failures, st.retry_at_ms, st.last_error = 0, None, None
            log.info("partition readable again", partition=str(tp))
        if tp in self._clean_given_up:
            seen = self._clean_given_up[tp]
            if seen is None:
                self._clean_given_up[tp] = fingerprint  # the files as the failure left them
            elif seen != fingerprint:
                del self._clean_given_up[tp]
                st.failures, st.retry_at_ms = 0, None

    def clean_failed(self, st: PartitionStatus, error: str, now_ms: int) -> dict[str, Any]:
        """A failed cleaning of ``st``'s partition; what happens next, for its log line."""
        gave_up = record_failure(st, error, self.retry, now_ms)
        if gave_up:
            self._clean_given_up[st.tp] = None  # fingerprint taken from the next fresh survey
        return outcome_fields(st, gave_up, now_ms)

    def clean_ok(self, tp: TopicPartition) -> None:
        self._clean_given_up.pop(tp, None)

    def resume(self, tp: TopicPartition) -> None:
        """An operator's "try again": the next survey and cleaning count from zero."""
        self._clean_given_up.pop(tp, None)
        self._read_given_up.pop(tp, None)

    def forget(self, tp: TopicPartition) -> None:
        self.unreadable.discard(tp)
        self._clean_given_up.pop(tp, None)
        self._read_given_up.pop(tp, None)

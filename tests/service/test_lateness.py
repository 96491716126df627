"""Compaction deadlines as the metrics count them: write times, the deadline of a range, and the
watch fed by hand-made surveys and cleanings (an exact clock, logs described segment by segment).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from cleanerd.compaction import CleaningPlan, LogMeta, SegmentMeta, plan
from cleanerd.format import LONG_MAX
from cleanerd.scheduling import CleaningState, PartitionStatus, Survey
from cleanerd.scheduling._metadata import PartitionMeta
from cleanerd.scheduling._survey import PartitionSurvey
from cleanerd.service._lateness import (
    DeadlineWatch,
    WrittenSegment,
    blocked_reason,
    deadline_ms,
    written_ms,
)
from cleanerd.storage import TopicPartition
from cleanerd.topics import TopicSettings

LAG = 60_000  # max.compaction.lag.ms of the topics here
T0 = 1_700_000_000_000
PER = 10  # records per segment
TP = TopicPartition("gdpr", 0)
ROOT = Path("/logs")


def _log(stamps: list[int | None], checkpoint: int | None = None) -> LogMeta:
    """One segment of ``PER`` records per first-batch timestamp, the last one active."""
    segments = tuple(
        SegmentMeta(i * PER, 1000, ts or 0, ts, (i + 1) * PER) for i, ts in enumerate(stamps)
    )
    end = len(stamps) * PER
    return LogMeta(TP, segments, 0, end, end, checkpoint)


def _settings(lag: int = LAG) -> TopicSettings:
    return TopicSettings.from_kafka({"cleanup.policy": "compact", "max.compaction.lag.ms": lag})


def _survey(now_ms: int, log: LogMeta, settings: TopicSettings | None = None) -> Survey:
    settings = settings or _settings()
    meta = PartitionMeta(TP, ROOT / TP.dir_name, log.size_bytes, 0, log=log)
    entry = PartitionSurvey(
        TP, ROOT, ROOT / TP.dir_name, meta, settings, plan(log, settings.cleaner, now_ms)
    )
    return Survey(now_ms=now_ms, epoch=0, partitions={TP: entry})


def _status(**kw: Any) -> PartitionStatus:
    return replace(PartitionStatus(TP, ROOT, ROOT / TP.dir_name, compacted=True), **kw)


@dataclass(frozen=True)
class _Taken:
    tp: TopicPartition
    plan: CleaningPlan


@dataclass(frozen=True)
class _Result:
    first_dirty_offset: int
    end_offset: int


def _taken(log: LogMeta, now_ms: int) -> _Taken:
    return _Taken(TP, plan(log, _settings().cleaner, now_ms))


# --- the definition ------------------------------------------------------------------------------
def test_a_write_time_is_the_timestamp_capped_by_when_the_daemon_first_saw_it() -> None:
    assert written_ms(T0, T0 + 5) == T0  # written before the daemon saw it
    assert written_ms(T0 + 3_600_000, T0) == T0  # a producer clock an hour ahead
    assert written_ms(None, T0) == T0  # no timestamp: when first seen
    assert written_ms(-1, T0) == T0  # Kafka's "no timestamp"
    assert written_ms(0, T0) == T0


def test_the_deadline_of_a_range_is_its_earliest_segment_plus_the_lag() -> None:
    segments = [
        WrittenSegment(0, 10, T0 + 500),
        WrittenSegment(10, 20, T0),  # out of order: an earlier write in a later segment
        WrittenSegment(20, 30, T0 + 900),
    ]
    assert deadline_ms(segments, 0, 30, LAG) == T0 + LAG
    assert deadline_ms(segments, 5, 10, LAG) == T0 + 500 + LAG  # the segment holding 5
    assert deadline_ms(segments, 20, 30, LAG) == T0 + 900 + LAG
    assert deadline_ms(segments, 30, 40, LAG) is None  # nothing there
    assert deadline_ms(segments, 0, 30, LONG_MAX) is None  # Kafka's default: no deadline


def test_why_a_partition_cannot_be_cleaned() -> None:
    assert blocked_reason(_status()) is None
    assert blocked_reason(_status(uncleanable=True, failures=3)) == "uncleanable"
    assert blocked_reason(_status(paused_count=1, state=CleaningState.PAUSED)) == "paused"
    assert blocked_reason(_status(paused_count=1, state=CleaningState.ABORTED)) == "paused"
    assert blocked_reason(_status(failures=1, retry_at_ms=T0)) == "failing"
    # a retry running now is a cleaning, not a block
    assert blocked_reason(_status(failures=1, state=CleaningState.IN_PROGRESS)) is None


# --- the watch -----------------------------------------------------------------------------------
def test_the_next_deadline_is_the_dirty_range_s_from_the_first_dirty_offset() -> None:
    watch = DeadlineWatch()
    log = _log([T0, T0 + 1000, T0 + 2000], checkpoint=PER)  # the first segment is clean
    watch.surveyed(_survey(T0 + 5000, log), [_status()], T0 + 5000)
    figures = watch.figures()
    assert figures.next_ms == {TP: T0 + 1000 + LAG}
    # the topic's series exist from the start, at zero
    assert figures.by_max_lag == {"gdpr": 0}
    assert set(figures.missed) == {
        ("gdpr", r) for r in ("late", "uncleanable", "paused", "failing")
    }
    assert set(figures.missed.values()) == {0}


def test_the_active_segment_s_records_have_a_deadline_too() -> None:
    watch = DeadlineWatch()
    log = _log([T0 + 1000], checkpoint=0)  # nothing rolled yet
    watch.surveyed(_survey(T0 + 2000, log), [_status()], T0 + 2000)
    assert watch.figures().next_ms == {TP: T0 + 1000 + LAG}


def test_a_topic_without_a_lag_has_no_deadline_and_no_series() -> None:
    watch = DeadlineWatch()
    log = _log([T0, T0 + 1000])
    survey = _survey(T0 + 2000, log, TopicSettings.from_kafka({"cleanup.policy": "compact"}))
    watch.surveyed(survey, [_status()], T0 + 2000)
    figures = watch.figures()
    assert (figures.next_ms, figures.missed, figures.by_max_lag) == ({}, {}, {})


def test_a_future_timestamp_counts_from_when_the_daemon_first_saw_the_segment() -> None:
    watch = DeadlineWatch()
    ahead = T0 + 10 * LAG  # a producer clock far ahead
    first = _log([ahead, None])
    watch.surveyed(_survey(T0, first), [_status()], T0)
    assert watch.figures().next_ms == {TP: T0 + LAG}
    # later surveys keep the first sighting, and a new segment counts from its own
    later = _log([ahead, ahead, ahead])
    watch.surveyed(_survey(T0 + 5000, later), [_status()], T0 + 5000)
    assert watch.figures().next_ms == {TP: T0 + LAG}
    cleaned = watch.cleaned(_taken(later, T0 + 6000), _Result(0, 2 * PER), T0 + 6000)
    assert cleaned == pytest.approx((6000 - LAG) / 1000)
    # the rest of the dirty range: the third segment, first seen at T0 + 5000
    assert watch.figures().next_ms == {TP: T0 + 5000 + LAG}


def test_a_cleaning_ahead_of_the_deadline_is_negative_and_no_miss() -> None:
    watch = DeadlineWatch()
    log = _log([T0, T0 + 1000, T0 + 2000])
    watch.surveyed(_survey(T0 + 3000, log), [_status()], T0 + 3000)
    delay = watch.cleaned(_taken(log, T0 + 4000), _Result(0, 2 * PER), T0 + 4000)
    assert delay == pytest.approx((4000 - LAG) / 1000)
    figures = watch.figures()
    assert set(figures.missed.values()) == {0}
    assert figures.by_max_lag == {"gdpr": 0}  # not past the lag when taken
    assert figures.next_ms == {TP: T0 + 2000 + LAG}  # the active segment's, until a survey


def test_a_late_cleaning_is_a_miss_and_a_cleaning_by_the_max_lag() -> None:
    watch = DeadlineWatch()
    log = _log([T0, T0 + 1000, T0 + 2000])
    now = T0 + LAG + 7000
    watch.surveyed(_survey(now, log), [_status()], now)
    taken = _taken(log, now)
    assert taken.plan.need_compaction_now
    assert watch.cleaned(taken, _Result(0, 2 * PER), now + 500) == pytest.approx(7.5)
    figures = watch.figures()
    assert figures.missed["gdpr", "late"] == 1
    assert figures.by_max_lag == {"gdpr": 1}
    # nothing cleaned: no observation, no miss
    assert watch.cleaned(taken, _Result(2 * PER, 2 * PER), now + 600) is None
    assert watch.figures().missed["gdpr", "late"] == 1


def test_a_blocked_partition_s_deadline_is_missed_once_whatever_follows() -> None:
    watch = DeadlineWatch()
    log = _log([T0, T0 + 1000, T0 + 2000])
    paused = _status(paused_count=1, state=CleaningState.PAUSED)
    watch.surveyed(_survey(T0 + 1000, log), [paused], T0 + 1000)
    assert watch.figures().missed["gdpr", "paused"] == 0  # not due yet
    for now in (T0 + LAG + 1, T0 + LAG + 5000, T0 + LAG + 9000):
        watch.surveyed(_survey(now, log), [paused], now)
    # it became uncleanable meanwhile: the same deadline, still one miss
    watch.surveyed(_survey(T0 + LAG + 10_000, log), [_status(uncleanable=True)], T0 + LAG + 10_000)
    # resumed and cleaned, late, for that same deadline: not counted again
    now = T0 + LAG + 20_000
    assert watch.cleaned(_taken(log, now), _Result(0, 2 * PER), now) == pytest.approx(20.0)
    missed = watch.figures().missed
    assert (missed["gdpr", "paused"], missed["gdpr", "uncleanable"], missed["gdpr", "late"]) == (
        1,
        0,
        0,
    )


def test_each_new_deadline_of_a_blocked_partition_is_one_more_miss() -> None:
    watch = DeadlineWatch()
    failing = _status(failures=1, retry_at_ms=T0)
    watch.surveyed(_survey(T0 + LAG + 1, _log([T0, T0 + 10])), [failing], T0 + LAG + 1)
    # cleaned on a retry (late, already counted), then stuck again with newer records
    watch.cleaned(_taken(_log([T0, T0 + 10]), T0 + LAG + 2), _Result(0, PER), T0 + LAG + 2)
    later = T0 + 2 * LAG + 100
    newer = _log([T0, T0 + 10, T0 + 20], checkpoint=PER)
    watch.surveyed(_survey(later, newer), [_status(uncleanable=True)], later)
    missed = watch.figures().missed
    assert (missed["gdpr", "failing"], missed["gdpr", "uncleanable"], missed["gdpr", "late"]) == (
        1,
        1,
        0,
    )


def test_a_survey_older_than_the_last_cleaning_is_not_taken() -> None:
    watch = DeadlineWatch()
    log = _log([T0, T0 + 1000, T0 + 2000])
    watch.surveyed(_survey(T0 + 3000, log), [_status()], T0 + 3000)
    watch.cleaned(_taken(log, T0 + 3500), _Result(0, 2 * PER), T0 + 4000)
    # a survey begun before the swap still shows the old dirty range, whose deadline has passed
    # by now; the partition failed since: the new range's deadline has not passed
    now = T0 + LAG + 1000
    watch.surveyed(_survey(T0 + 3900, log), [_status(failures=1)], now)
    assert watch.figures().next_ms == {TP: T0 + 2000 + LAG}
    assert watch.figures().missed["gdpr", "failing"] == 0


def test_a_partition_being_cleaned_keeps_what_was_known() -> None:
    watch = DeadlineWatch()
    watch.surveyed(_survey(T0, _log([T0, T0 + 1000])), [_status()], T0)
    busy = _status(state=CleaningState.IN_PROGRESS)
    watch.surveyed(_survey(T0 + 10, _log([T0 + 5000, T0 + 6000])), [busy], T0 + 10)
    assert watch.figures().next_ms == {TP: T0 + LAG}


def test_a_partition_gone_leaves_its_topic_s_counts() -> None:
    watch = DeadlineWatch()
    log = _log([T0, T0 + 1000])
    watch.surveyed(_survey(T0 + LAG + 1, log), [_status(uncleanable=True)], T0 + LAG + 1)
    watch.surveyed(Survey(now_ms=T0 + LAG + 2, epoch=0, partitions={}), [], T0 + LAG + 2)
    figures = watch.figures()
    assert figures.next_ms == {}
    assert figures.missed["gdpr", "uncleanable"] == 1


def test_the_figures_as_status_json() -> None:
    watch = DeadlineWatch()
    log = _log([T0, T0 + 1000])
    watch.surveyed(_survey(T0 + LAG + 1, log), [_status(uncleanable=True)], T0 + LAG + 1)
    assert watch.figures().to_json() == {
        "missed": {"gdpr": {"failing": 0, "late": 0, "paused": 0, "uncleanable": 1}},
        "compacted_by_max_lag": {"gdpr": 0},
        "next_ms": {"gdpr-0": T0 + LAG},
    }

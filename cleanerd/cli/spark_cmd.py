"""``cleanerd spark ...``: the Spark engine's commands (``compact`` for now).

Importing this module needs no pyspark: the command checks for the ``spark`` extra when it runs
and says how to install it. Also runnable with ``spark-submit`` (the master and resources then
come from spark-submit's own options)::

    spark-submit --master spark://host:7077 "$(python -c 'import cleanerd.cli.spark_cmd as m;
    print(m.__file__)')" compact /shared/kafka-logs --now 1700000000000
"""

from __future__ import annotations

if __name__ == "__main__":  # spark-submit runs this file: numba's cache dir is chosen before
    # the imports below load numba (an entry point's job, as ``cleanerd.cli.main`` does it)
    from cleanerd._jitcache import configure_numba_cache

    configure_numba_cache()

import contextlib
import json
from pathlib import Path

import click

from cleanerd.cli._compact import _check_jobs, _note, _print_table
from cleanerd.cli._errors import print_error
from cleanerd.cli._options import cleaning_options, format_option
from cleanerd.cli._targets import find_targets, load_selection, select, target_options
from cleanerd.spark import SparkMissingError, require_pyspark
from cleanerd.storage import LogDir, StorageError, wall_clock_ms


@click.group("spark")
def spark_group() -> None:
    """Run cleanerd's engine on Apache Spark (needs the spark extra and Java 17)."""


def _conf(pairs: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{pair!r}: expected KEY=VALUE", param_hint="--conf")
        out[key.strip()] = value
    return out


@spark_group.command("compact")
@target_options
@click.option("--master", help="Spark master URL [default: spark-submit's, else local[*]].")
@click.option("--conf", "confs", multiple=True, metavar="KEY=VALUE", help="Spark conf (repeat).")
@cleaning_options
@click.option(
    "--task-budget-bytes",
    type=click.IntRange(min=1),
    default=128 << 20,
    show_default=True,
    help="Offset map memory of one task: a partition whose dirty range needs more is "
    "deduplicated across tasks (plan B), the others run whole in one task each (plan A).",
)
@click.option(
    "--staging-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where plan B stages cleaned segments: on the log dirs' filesystem, seen by every "
    "executor [default: .<logdir>.cleanerd-staging beside each log dir].",
)
@click.option("--dry-run", is_flag=True, help="Compact temporary copies; write nothing here.")
@format_option("text: a summary table; json: one JSON object per partition per line.")
def compact(
    paths: tuple[Path, ...],
    topic: str | None,
    partition: int | None,
    now_ms: int | None,
    config_file: Path | None,
    kafka_properties: Path | None,
    sets: tuple[str, ...],
    master: str | None,
    confs: tuple[str, ...],
    strategy: str | None,
    strategy_header: str | None,
    delete_retention_ms: int | None,
    min_compaction_lag_ms: int | None,
    producer_id_expiration_ms: int | None,
    roll_active: bool,
    task_budget_bytes: int,
    staging_dir: Path | None,
    dry_run: bool,
    fmt: str,
) -> None:
    """Compact LOGDIR or PARTITION_DIRs on Spark, with exactly `cleanerd compact`'s result.

    Each partition whose dirty range fits --task-budget-bytes of offset map runs whole in one
    Spark task (plan A); a bigger one is deduplicated across tasks by a shuffle on the key hash
    and written by one task per segment group, swapped in only when every task succeeded
    (plan B). Settings and output are `cleanerd compact`'s. Log dirs must be on a filesystem
    every executor sees; executors need cleanerd (with the spark extra) and Java 17.

    Exit status: 0 done; 1 a log dir is locked, the spark extra is missing, or some partition
    failed (it is left as it was); 2 usage error.
    """
    try:
        require_pyspark()
    except SparkMissingError as e:
        raise click.ClickException(str(e)) from None
    from cleanerd.spark import (  # noqa: PLC0415 (loads the engine and pyspark)
        Options,
        PartitionJob,
        build_session,
        compact_on_spark,
    )

    overrides = {
        "compaction.strategy": strategy,
        "compaction.strategy.header": strategy_header,
        "delete.retention.ms": delete_retention_ms,
        "min.compaction.lag.ms": min_compaction_lag_ms,
        "producer.id.expiration.ms": producer_id_expiration_ms,
    }
    conf = _conf(confs)
    selection = load_selection(config_file, kafka_properties, sets)
    jobs = select(find_targets(paths, topic, partition), selection, overrides)
    _check_jobs(jobs, task_budget_bytes, strategy)
    if not jobs:
        click.echo("no partitions to compact", err=True)
        return
    now = wall_clock_ms() if now_ms is None else now_ms
    options = Options(now, task_budget_bytes, dry_run, roll_active, staging_dir)
    work = [PartitionJob(t.directory, s.log, s.cleaner, s.strategy) for t, s in jobs]
    with contextlib.ExitStack() as stack:
        if not dry_run:
            for logdir in sorted({t.directory.parent for t, _ in jobs}):
                try:
                    stack.enter_context(LogDir(logdir).locked())
                except StorageError as e:
                    print_error(f"{e}")
                    raise SystemExit(1) from None
        outcomes = compact_on_spark(build_session(master, conf), work, options)
    results, failures = [], []
    for o in outcomes:
        click.echo(f"{o.partition}: plan {o.plan} ({o.dirty_records} dirty records)", err=True)
        if o.summary is None:
            print_error(f"{o.partition}: {o.error}")
            failures.append(o.partition)
            if fmt == "json":
                click.echo(json.dumps({"partition": o.partition, "error": o.error}))
            continue
        results.append(o.summary)
        if o.summary.checkpoint_reset is not None:
            click.echo(f"warning: {o.partition}: {o.summary.checkpoint_reset}", err=True)
        if o.summary.ledger_error is not None:
            click.echo(f"warning: {o.partition}: {o.summary.ledger_error}", err=True)
        for problem in o.summary.txn_index_problems:
            click.echo(f"warning: {o.partition}: transaction index rebuilt: {problem}", err=True)
        if fmt == "json":
            click.echo(json.dumps({**o.summary.to_json(), "note": _note(o.summary)}))
    if fmt == "text":
        _print_table(results, failures, dry_run)
    if failures:
        raise SystemExit(1)


if __name__ == "__main__":  # spark-submit .../cleanerd/cli/spark_cmd.py compact ...
    spark_group()

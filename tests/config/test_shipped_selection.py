"""Every configuration the project ships, loaded as an operator would load it, compacts exactly
the partitions its comments promise on one sample log dir: the production configs compact
nothing until a topic is named, and each example table selects the topic it is written for (a
table's glob matches topic names, never partition dirs).

The selection is what ``cleanerd plan`` lists: with a config, only partitions whose topic's
``cleanup.policy`` contains ``compact``, the same rule the daemon's survey applies.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from cleanerd.workload import WorkloadSpec, generate
from tests.support.cli import ok

REPO = Path(__file__).resolve().parents[2]
NOW = 1_800_000_000_000
# One partition dir per topic, except orders (two): a table named for a topic must select every
# partition of it, and one named "orders-*" (the old example) would have selected none of them.
TOPICS = {
    "orders": 2,
    "orders-eu": 1,
    "payments": 1,
    "customers-pii": 1,
    "cdc.inventory.orders": 1,
    "accounts": 1,
    "__consumer_offsets": 1,
}
KRAFT_METADATA = "__cluster_metadata-0"


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("shipped") / "logs"
    for topic, partitions in TOPICS.items():
        # small segments, so every partition has a rolled one a plan can list
        spec = WorkloadSpec(
            topic=topic,
            partitions=partitions,
            records=60,
            keys=10,
            records_per_batch=5,
            segment_bytes=2_000,
        )
        generate(root, spec)
    # KRaft's metadata log: never a log to compact, whatever a config says
    shutil.copytree(root / "payments-0", root / KRAFT_METADATA)
    return root


def selected(logdir: Path, *config: str) -> set[str]:
    result = ok("plan", logdir, "--now", NOW, "--format", "json", *config)
    return {json.loads(line)["partition"] for line in result.stdout.splitlines()}


def uncomment_topic_examples(text: str) -> str:
    """The per-topic tables ``config/cleanerd.toml`` ships commented out, made live."""
    head, _, tables = text.partition("# --- per-topic settings")
    live = re.sub(r'^# (\[topics\.|"?[a-z][a-z0-9_.]*"? *= )', r"\1", tables, flags=re.MULTILINE)
    return head + "# --- per-topic settings" + live


def test_the_production_config_compacts_nothing_until_a_topic_is_named(logdir: Path) -> None:
    """deploy/README.md installs config/cleanerd.toml as /etc/cleanerd/cleanerd.toml."""
    assert selected(logdir, "--config", str(REPO / "config" / "cleanerd.toml")) == set()


def test_the_container_config_compacts_nothing_until_a_topic_is_named(logdir: Path) -> None:
    config = REPO / "deploy" / "container" / "cleanerd.toml"
    assert selected(logdir, "--config", str(config)) == set()


def test_the_kafka_properties_example_compacts_nothing(logdir: Path) -> None:
    """A broker's server.properties says nothing about single topics: nothing is compacted."""
    properties = REPO / "config" / "cleanerd.properties"
    assert selected(logdir, "--kafka-properties", str(properties)) == set()


def test_the_commented_examples_select_the_topics_they_name(logdir: Path, tmp_path: Path) -> None:
    """Uncommented, the example tables select orders (both partitions, not orders-eu) and the
    consumer offsets, and give orders its overrides."""
    text = (REPO / "config" / "cleanerd.toml").read_text()
    live = tmp_path / "cleanerd.toml"
    live.write_text(uncomment_topic_examples(text))
    assert live.read_text() != text
    assert selected(logdir, "--config", str(live)) == {
        "orders-0",
        "orders-1",
        "__consumer_offsets-0",
    }
    result = ok(
        "plan", logdir, "--now", NOW, "--format", "json", "--config", live, "--topic", "orders"
    )
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert {row["strategy"] for row in rows} == {"header"}
    assert {row["min_cleanable_dirty_ratio"] for row in rows} == {0.2}


@pytest.mark.parametrize(
    ("example", "partitions"),
    [
        ("gdpr.toml", {"customers-pii-0"}),
        ("cdc.toml", {"cdc.inventory.orders-0"}),
        ("versioned.toml", {"accounts-0"}),
    ],
)
def test_each_topic_example_selects_its_topic(
    logdir: Path, example: str, partitions: set[str]
) -> None:
    config = REPO / "config" / "topics" / example
    assert selected(logdir, "--config", str(config)) == partitions


def test_every_shipped_config_is_tried_here() -> None:
    """A config added to the project is added to this file's checks."""
    shipped = {
        str(p.relative_to(REPO))
        for pattern in ("config/**/*.toml", "config/*.properties", "deploy/**/*.toml")
        for p in REPO.glob(pattern)
    }
    assert shipped == {
        "config/cleanerd.toml",
        "config/cleanerd.properties",
        "config/topics/gdpr.toml",
        "config/topics/cdc.toml",
        "config/topics/versioned.toml",
        "deploy/container/cleanerd.toml",
    }


def test_a_catch_all_table_compacts_every_topic_but_the_kraft_metadata_log(
    logdir: Path, tmp_path: Path
) -> None:
    """Why the docs warn against "*": it compacts every topic, delete-policy ones included.
    KRaft's metadata log is the one exception; cleanerd never lists it as a partition."""
    config = tmp_path / "all.toml"
    config.write_text('[topics."*"]\ncleanup.policy = "compact"\n')
    everything = {f"{t}-{p}" for t, n in TOPICS.items() for p in range(n)}
    assert selected(logdir, "--config", str(config)) == everything
    assert KRAFT_METADATA not in everything

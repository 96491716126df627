"""The parts of the documentation that are generated from the code: every command's ``--help``,
the settings with their defaults, and the metrics table.

A generated part sits between ``<!-- generated: NAME -->`` and ``<!-- end generated -->`` in a
Markdown file; everything around it is written by hand. ``tests/project/test_reference_docs.py``
fails when a part differs from what the code says now, and ``python -m tests.support.reference``
rewrites every part in place (run it after changing an option, a setting or a metric).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import click

from cleanerd.cli import COMMANDS, cli
from cleanerd.config import restart_only
from cleanerd.config._sources import ALIASES, DAEMON_SETTINGS, TIME_SYNONYMS, env_name
from cleanerd.service._metrics_doc import METRICS_DOC
from cleanerd.topics._catalog import TOPIC_SETTINGS

REPO = Path(__file__).resolve().parents[2]
DOCUMENTS = (
    REPO / "docs" / "commands.md",
    REPO / "docs" / "configuration.md",
    REPO / "docs" / "metrics.md",
)
REGION = re.compile(
    r"(?P<open><!-- generated: (?P<name>[^>]*?) -->\n)(?P<body>.*?)"
    r"(?P<close><!-- end generated -->)",
    re.DOTALL,
)
HELP_WIDTH = 100  # fixed, so the text does not depend on the terminal that regenerates it


def command_paths() -> list[tuple[str, ...]]:
    """Every command, and every subcommand of a group, in the order ``--help`` lists them."""
    ctx = click.Context(cli, info_name="cleanerd")
    paths: list[tuple[str, ...]] = []
    for name in cli.list_commands(ctx):
        command = cli.get_command(ctx, name)
        assert command is not None, name
        paths.append((name,))
        if isinstance(command, click.Group):
            paths += [(name, sub) for sub in command.list_commands(ctx)]
    return paths


def command(path: tuple[str, ...]) -> tuple[click.Command, click.Context]:
    """The command at ``path`` and a context for it, its parents named as on the command line."""
    # each context with its command's own settings (-h), as click's make_context applies them
    ctx = click.Context(
        cli,
        info_name="cleanerd",
        terminal_width=HELP_WIDTH,
        max_content_width=HELP_WIDTH,
        **cli.context_settings,
    )
    current: click.Command = cli
    for name in path:
        assert isinstance(current, click.Group), path
        found = current.get_command(ctx, name)
        assert found is not None, path
        current = found
        ctx = click.Context(current, info_name=name, parent=ctx, **current.context_settings)
    return current, ctx


def help_text(path: tuple[str, ...]) -> str:
    found, ctx = command(path)
    # click (8.1.8+) keeps a command's help option as the first context that asked made it: a
    # test that ran the command on its own (no parent, so no -h) must not change this text
    found._help_option = None
    return found.get_help(ctx)


def options(path: tuple[str, ...]) -> set[str]:
    """Every option spelling of the command at ``path`` (``--help`` and ``-h`` included)."""
    found, ctx = command(path)
    names = set(found.get_help_option_names(ctx))
    for param in found.get_params(ctx):
        if isinstance(param, click.Option):
            names.update(param.opts + param.secondary_opts)
    return names


def _default(value: object) -> str:
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if value == "":
        return "(empty)"
    return f"`{value}`"


def _settings_daemon() -> str:
    synonyms: dict[str, list[str]] = {}
    for spelling, (name, _) in TIME_SYNONYMS.items():
        synonyms.setdefault(name, []).append(spelling)
    for alias, name in ALIASES.items():
        synonyms.setdefault(name, []).append(alias)
    lines = [
        "| setting | default | what it does | environment variable | a reload applies it |",
        "|---|---|---|---|---|",
    ]
    for s in DAEMON_SETTINGS:
        also = "".join(f" (or `{x}`)" for x in synonyms.get(s.name, ()))
        reload = "no: restart" if restart_only(s.name) else "yes"
        lines.append(
            f"| `{s.name}`{also} | {_default(s.default)} | {s.meaning} | `{env_name(s.name)}` "
            f"| {reload} |"
        )
    return "\n".join(lines)


def _settings_topics() -> str:
    synonyms: dict[str, list[str]] = {}
    for spelling, (name, _) in TIME_SYNONYMS.items():
        synonyms.setdefault(name, []).append(spelling)
    lines = [
        "| topic setting | Kafka's default | what it does | broker setting (its default) "
        "| environment variable |",
        "|---|---|---|---|---|",
    ]
    for s in TOPIC_SETTINGS:
        also = "".join(f" (or `{x}`)" for x in synonyms.get(s.broker, ()))
        lines.append(
            f"| `{s.name}` | {_default(s.default)} | {s.meaning} | `{s.broker}`{also} "
            f"| `{env_name(s.broker)}` |"
        )
    return "\n".join(lines)


def _metrics() -> str:
    lines = ["| metric | type | meaning | Kafka JMX name |", "|---|---|---|---|"]
    for d in METRICS_DOC:
        kafka = f"`{d.kafka}`" if d.kafka else ""
        lines.append(f"| `{d.name}` | {d.type} | {d.help} | {kafka} |")
    return "\n".join(lines)


def names() -> list[str]:
    """The name of every generated part the documents must hold."""
    helps = [f"help {' '.join(path)}" for path in command_paths()]
    return [*helps, "settings daemon", "settings topics", "metrics"]


def render(name: str) -> str:
    """The text of the generated part ``name``, ending with a newline."""
    if name.startswith("help "):
        path = tuple(name.split()[1:])
        if path[0] not in COMMANDS or path not in command_paths():
            raise KeyError(f"no command 'cleanerd {' '.join(path)}'")
        return f"```text\n{help_text(path)}\n```\n"
    makers = {
        "settings daemon": _settings_daemon,
        "settings topics": _settings_topics,
        "metrics": _metrics,
    }
    if name not in makers:
        raise KeyError(f"no generated part {name!r}")
    return makers[name]() + "\n"


def regions(text: str) -> Iterator[tuple[str, str]]:
    """(name, body) of each generated part of ``text``."""
    for match in REGION.finditer(text):
        yield match.group("name"), match.group("body")


def refreshed(text: str) -> str:
    """``text`` with every generated part as the code says it now."""
    return REGION.sub(lambda m: m.group("open") + render(m.group("name")) + m.group("close"), text)


def main() -> None:
    for document in DOCUMENTS:
        text = document.read_text()
        new = refreshed(text)
        if new != text:
            document.write_text(new)
            print(f"rewrote {document.relative_to(REPO)}", file=sys.stderr)


if __name__ == "__main__":
    main()

"""One line instead of a traceback when a command meets an OS or storage error.

Every command is wrapped by ``guard`` when the ``cleanerd`` group loads it, so a permission
problem, a path that is not a directory or a full disk ends any command the same way: one
``error:`` line on stderr naming the command, the path and what could not be done, exit 1.
Commands that report such errors themselves (per partition, per file) keep doing so; this is
the net under them.
"""

from __future__ import annotations

import errno
import functools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import click

from cleanerd.format import CorruptRecordError
from cleanerd.storage import StorageError

EXIT_FAILED = 1
_WRITING = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})
_GUARDED = "__cleanerd_guarded__"


def _text(name: object) -> str:
    return os.fsdecode(name) if isinstance(name, str | bytes | os.PathLike) else str(name)


def _printing(exc: BaseException) -> bool:
    """Whether the failed call was printing (``click.echo``, a rich console): the output, not
    a file of the log dir, is what could not be written (``> /dev/full``, a full disk)."""
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if (code.co_name == "echo" and "click" in code.co_filename) or (
            f"{os.sep}rich{os.sep}" in code.co_filename
        ):
            return True
        tb = tb.tb_next
    return False


def os_error_line(command: str, exc: OSError, paths: tuple[Path, ...] = ()) -> str:
    """``cleanerd verify: cannot access /d/t-0/0.log: Permission denied``; when the error names
    no file (a write that found the disk full), the output or the command's own paths stand in
    for it."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    verb = "write to" if exc.errno in _WRITING else "access"
    if exc.filename is not None:
        return f"{command}: {os_error_text(exc)}"
    if _printing(exc):
        return f"{command}: cannot write its output: {reason}"
    where = f" {' '.join(str(p) for p in paths)}" if paths else ""
    return f"{command}{where}: cannot {verb.removesuffix(' to')}: {reason}"


def os_error_text(exc: OSError) -> str:
    """What could not be done, for a line that already says who and where: ``cannot access
    /d/t-0/0.log: Permission denied`` (the reason alone when the error names no file)."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    verb = "write to" if exc.errno in _WRITING else "access"
    if exc.filename is not None and exc.filename2 is not None:
        return f"cannot move {_text(exc.filename)} to {_text(exc.filename2)}: {reason}"
    if exc.filename is not None:
        return f"cannot {verb} {_text(exc.filename)}: {reason}"
    return reason


def _paths(params: dict[str, Any]) -> Iterator[Path]:
    for value in params.values():
        items = value if isinstance(value, tuple | list) else (value,)
        yield from (item for item in items if isinstance(item, Path))


def command_name(ctx: click.Context) -> str:
    """``cleanerd config check`` whatever the program was called (``python -m cleanerd``)."""
    names = []
    while ctx.parent is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    return " ".join(["cleanerd", *reversed(names)])


def print_error(message: str) -> None:
    """One error line on stderr, in the one style of every command: ``error: <message>``."""
    click.echo(f"error: {message}", err=True)


def fail(message: str) -> NoReturn:
    print_error(message)
    raise SystemExit(EXIT_FAILED)


def _show(exc: click.ClickException) -> None:
    """click's report of a usage or command error, in the lines every command prints itself:
    ``error: ...`` (click's own says ``Error:``)."""
    if isinstance(exc, click.UsageError) and exc.ctx is not None:
        ctx = exc.ctx
        click.echo(
            f"{ctx.get_usage()}\nTry '{ctx.command_path} --help' for help.\n",
            err=True,
            color=ctx.color,
        )
    print_error(exc.format_message())


def restyled(exc: click.ClickException) -> click.ClickException:
    """``exc``, reported by :func:`_show` when click's standalone main shows it."""
    exc.show = functools.partial(_show, exc)  # type: ignore[method-assign]
    return exc


def guard(command: click.Command) -> click.Command:
    """Wrap ``command``'s callback (each subcommand's, for a group) once; returns it."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            guard(sub)
        return command
    callback = command.callback
    if callback is None or getattr(callback, _GUARDED, False):
        return command

    @functools.wraps(callback)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return callback(*args, **kwargs)
        except BrokenPipeError:
            raise  # the reader went away (``| head``): click ends quietly with exit 1
        except OSError as e:
            name = command_name(click.get_current_context())
            fail(os_error_line(name, e, tuple(dict.fromkeys(_paths(kwargs)))))
        except (StorageError, CorruptRecordError) as e:
            fail(f"{command_name(click.get_current_context())}: {e}")

    setattr(guarded, _GUARDED, True)
    command.callback = guarded
    return command

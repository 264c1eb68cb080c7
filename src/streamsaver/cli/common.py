"""What every command of the ``streamsaver`` command line shares: the options, the exit codes,
and the one boundary where an exception becomes one line on stderr and an exit code."""

from __future__ import annotations

import errno
import functools
import inspect
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer import _click as click
from typer._click.exceptions import UsageError
from typer.core import TyperCommand, TyperGroup

from ..core.errors import (
    IntegrityError,
    InvalidInputError,
    ServerUnavailableError,
    StreamSaverError,
)

if TYPE_CHECKING:
    from ..checkpoint.saver import RedisStreamSaver

__all__ = [
    "EXIT_CODES",
    "SETTINGS",
    "Every",
    "Json",
    "Prefix",
    "ThreadNotFoundError",
    "Url",
    "add",
    "epilog",
    "group",
    "guarded",
    "need_url",
    "plural",
    "require_threads",
]

OK, PROBLEM, USAGE, NOT_FOUND, UNAVAILABLE, ADDRESS_IN_USE, INTERRUPTED = 0, 1, 2, 3, 4, 5, 130

EXIT_CODES = f"""\
exit codes:
  {OK}  done, nothing wrong found
  {PROBLEM}  an integrity problem was found (verify, audit verify, rebuild, doctor)
  {USAGE}  usage: a bad option, a missing --url, a file that cannot be read or is
     not what the command reads (audit verify --file: not an export)
  {NOT_FOUND}  no such thread (history, tail, verify, audit show/verify)
  {UNAVAILABLE}  Redis cannot be reached: down, wrong password, TLS mismatch, timeout
  {ADDRESS_IN_USE}  serve: another program listens on --host/--port already
  {INTERRUPTED}  interrupted (Ctrl-C)

Add --debug before the command for a traceback instead of the one-line error."""

Url = Annotated[
    str | None,
    typer.Option(
        envvar="REDIS_URL",
        show_envvar=False,
        help="Redis URL, e.g. redis://localhost:6379/0 (default: $REDIS_URL)",
    ),
]
Prefix = Annotated[str, typer.Option(help="key prefix of the saver")]
Json = Annotated[bool, typer.Option("--json", help="machine-readable output (JSON)")]
Every = Annotated[bool, typer.Option("--all", help="every thread under the prefix")]


class ThreadNotFoundError(StreamSaverError):
    """The command line was given a thread id that has no log and no deletion record."""


def reflow(doc: str | None) -> str:
    """A docstring as help click can wrap to the terminal (``epilog``)."""
    return epilog(inspect.cleandoc(doc or ""))


def epilog(text: str) -> str:
    """Help text click wraps to the terminal, but for paragraphs with an indented line
    (examples, tables), which keep their lines (click's ``\\b`` marker)."""
    return "\n\n".join(
        verbatim(p) if any(line.startswith(" ") for line in p.splitlines()) else p
        for p in text.strip("\n").split("\n\n")
    )


def verbatim(text: str) -> str:
    """Help printed with its lines as written (examples, the exit codes): click rewraps every
    paragraph but one whose first line is ``\\b``."""
    return "\n\n".join("\b\n" + p for p in text.strip("\n").split("\n\n"))


def _bare(pieces: list[str]) -> list[str]:
    """A usage line's pieces with typer's braces around required arguments taken off."""
    return [re.sub(r"^\{(.*)\}", r"\1", piece) for piece in pieces]


# a value's placeholder as typer shows it: its Python type (<str>), or its choices (<a|b>)
_TYPE_LABEL = re.compile(r" <([^<>]*)>$")


class Command(TyperCommand):
    """A command's help as an operator reads it, at any width: an option's value named for
    what it is (``--url URL``, not ``<str>``), its choices as click shows them
    (``[saver|reader]``), and arguments by name alone, bare in the usage line when required
    (``tail THREAD_ID``, not ``{THREAD_ID}``). Markup is off: brackets print as written
    (``pip install 'streamsaver[web]'``)."""

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        return _bare(super().collect_usage_pieces(ctx))

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        given = list(args)  # the parser consumes the list it is given
        try:
            return super().parse_args(ctx, args)
        except UsageError as exc:
            # `threads redis://...`: the URL where a command takes none (doctor, serve and
            # functions load take it there too); say where it goes
            stray = [a for a in given if "://" in a]
            if stray and "unexpected extra argument" in str(exc):
                raise UsageError(
                    f"{stray[0]!r}: give the server as --url {stray[0]} (or set $REDIS_URL)", ctx
                ) from None
            raise

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        arguments, options = [], []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            name, text = record
            if param.param_type_name == "argument":
                arguments.append(((param.metavar or param.name or "").upper(), text))
            else:
                label = _TYPE_LABEL.search(name)
                if label:
                    shown = label[1] if "|" not in label[1] else f"[{label[1]}]"
                    if "|" not in shown:
                        shown = (param.name or "value").upper()
                    name = name[: label.start()] + " " + shown
                options.append((name, text))
        for title, rows in (("Arguments", arguments), ("Options", options)):
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


class Group(TyperGroup):
    """A command group whose usage line shows its arguments as ``Command`` does."""

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        return _bare(super().collect_usage_pieces(ctx))


def group(name: str, help: str, **options: Any) -> typer.Typer:
    """A command group: help wrapped by click, completion off (only the root offers it)."""
    return typer.Typer(
        name=name,
        help=reflow(help),
        no_args_is_help=True,
        add_completion=False,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"]},
        cls=Group,
        **options,
    )


def add(target: typer.Typer, name: str, function: Callable[..., int], **options: Any) -> None:
    """Register ``function``, which returns an exit code, as command ``name`` of ``target``,
    behind ``guarded``."""

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> None:
        code = guarded(lambda: function(*args, **kwargs))
        if code:
            raise typer.Exit(code)

    options.setdefault("help", reflow(function.__doc__))
    target.command(name, cls=Command, **options)(run)


@dataclass
class Settings:
    """What the root command's options set for the one command line a process runs."""

    prog: str = "streamsaver"
    debug: bool = False


SETTINGS = Settings()


# what redis-py's from_url opens; "valkey://" is Valkey's own name for redis://
_SCHEMES = ("redis://", "rediss://", "unix://", "valkey://", "valkeys://")
# host[:port] as redis-cli's -h/-p take them: a name or IPv4 address, or an [IPv6] address
_HOST_PORT = re.compile(r"(?:[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+\])(?::(?P<port>\d{1,5}))?")


def plural(count: int, noun: str) -> str:
    """``1 thread``, ``2 threads``: every count the commands print, worded one way."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def need_url(url: str | None) -> str:
    """The Redis URL a command talks to. ``host:port`` (or ``host``) is taken as redis-cli
    takes ``-h``/``-p``: ``redis://host:port``; anything else without a scheme is refused in one
    line, before a connection is tried."""
    if not url:
        raise InvalidInputError("no Redis to talk to: pass --url or set $REDIS_URL")
    lowered = url.lower()
    if lowered.startswith(("valkey://", "valkeys://")):
        return "redis" + url[len("valkey") :]
    if lowered.startswith(_SCHEMES):
        return url
    bare = None if "://" in url else _HOST_PORT.fullmatch(url)
    if bare:
        port = bare.group("port")
        if port and not 0 < int(port) < 65536:
            raise InvalidInputError(f"{url!r}: the port must be 1-65535")
        return "redis://" + url
    raise InvalidInputError(
        f"{url!r} is not a Redis URL: give redis://host:port/db (rediss:// for TLS, "
        f"unix:///path/to/redis.sock), or host:port"
    )


def require_threads(saver: RedisStreamSaver, thread_ids: Sequence[str]) -> None:
    """Raise ``ThreadNotFoundError`` for an id with neither a log nor a deletion record: a
    mistyped id otherwise reads as an empty, intact thread."""
    from ..core.keys import thread_keys

    missing = [
        t
        for t in thread_ids
        if not saver.client.exists(thread_keys(saver.prefix, t).log) and not saver.deletions(t)
    ]
    if missing:
        names = ", ".join(map(repr, missing))
        raise ThreadNotFoundError(
            f"no thread {names} under prefix {saver.prefix!r}: check the id and --prefix "
            f"(`streamsaver threads` lists the threads)"
        )


def guarded(command: Callable[[], int]) -> int:
    """Run ``command``; an expected failure becomes one line naming the problem and the remedy
    and its exit code (``EXIT_CODES``). --debug lets the traceback through instead."""
    prog, debug = SETTINGS.prog, SETTINGS.debug
    try:
        try:
            code = command()
            sys.stdout.flush()
            return code
        except (BrokenPipeError, KeyboardInterrupt):
            raise
        except Exception as exc:
            if debug:
                raise
            failure, line = _failure(exc)
            if failure is None:
                raise
            print(f"{prog}: {line}", file=sys.stderr)
            return failure
    except BrokenPipeError:
        # the reader went away (`| head`): what it wanted it has; the interpreter's final
        # flush of stdout must not fail again on the closed pipe
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return OK
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return INTERRUPTED


def _failure(exc: Exception) -> tuple[int | None, str]:
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import NoPermissionError

    if isinstance(exc, ThreadNotFoundError):
        return NOT_FOUND, str(exc)
    if isinstance(exc, OSError) and exc.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL):
        # only serve listens: the address it was given is taken or not this machine's
        return ADDRESS_IN_USE, f"cannot listen there: {exc.strerror}; pick another --port or --host"
    if isinstance(exc, ServerUnavailableError | RedisConnectionError):
        return UNAVAILABLE, str(exc)
    if isinstance(exc, NoPermissionError):
        return UNAVAILABLE, (
            f"Redis refused a command ({exc}): this user lacks a permission; "
            f"`streamsaver acl` prints the rules a role needs"
        )
    if isinstance(exc, InvalidInputError):
        return USAGE, str(exc)
    if isinstance(exc, IntegrityError | StreamSaverError):
        return PROBLEM, str(exc)
    if isinstance(exc, FileNotFoundError | IsADirectoryError | PermissionError):
        return USAGE, f"cannot open {exc.filename!r}: {exc.strerror}"
    return None, ""

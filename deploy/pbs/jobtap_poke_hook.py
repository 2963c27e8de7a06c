# PBS Pro / OpenPBS hook: tell jobtap's collector (follow mode) that a job just
# changed, so it refreshes the job at once instead of at the next poll.
# Installed by deploy/pbs/install-hook.sh (see deploy/pbs/README.md) as two hooks
# with this same file and the same configuration:
#
# * jobtap_poke, a server hook on runjob, modifyjob and jobobit: it starts
#   `jobtap poke` in the background (the server runs hooks in its own process:
#   nothing here may block it) and accepts the event at once.
# * jobtap_mom_poke, a MoM hook on execjob_epilogue: the first moment PBS knows a
#   job has ended is on its execution host, before the MoM tells the server.  The
#   hook writes the poke itself (a few lines of the Redis protocol, no process to
#   start), marked "ended", so the collector keeps looking until the server shows
#   the job finished.  It waits at most "timeout" seconds (0.25) for Redis; the
#   execution hosts must reach Redis for it to help.  A rediss:// URL is served
#   with Python's ssl module and redis-py's query parameters (ssl_ca_certs,
#   ssl_certfile, ssl_keyfile, ssl_cert_reqs, ssl_check_hostname): the server's
#   certificate is verified unless ssl_cert_reqs=none.
#
# Whatever happens the event is accepted: a lost poke only means the change is
# seen at the next full stat.  The configuration (a JSON file imported with the
# hook) holds poker's Redis URL: poker may only append to the poke stream.
import json
import os
import socket
import ssl
import subprocess

from urllib.parse import parse_qsl, unquote, urlsplit

import pbs

DEFAULTS = {
    "jobtap": "/opt/jobtap/bin/jobtap",
    "site": "default",
    "redis": "",
    "stream": "",  # the site's poke stream key (install-hook.sh asks jobtap for it)
    "maxlen": 10000,
    "timeout": 0.25,
}
MOM_EVENTS = ("EXECJOB_EPILOGUE",)


def load_config():
    config = dict(DEFAULTS)
    path = getattr(pbs, "hook_config_filename", None)
    if path and os.path.exists(path):
        with open(path) as f:
            config.update(json.load(f))
    return config


def job_id(event):
    job = getattr(event, "job", None)
    jid = getattr(job, "id", None) if job is not None else None
    if not jid:  # queuejob: the server has not numbered the job yet
        jid = getattr(event, "job_id", None)
    return str(jid) if jid else None


def on_execution_host(event):
    kind = getattr(event, "type", None)
    return kind is not None and any(kind == getattr(pbs, name, object()) for name in MOM_EVENTS)


def poke_in_background(config, jid):
    """`jobtap poke` as a detached process; the URL (poker's password) goes
    through the environment, never the command line that `ps` shows."""
    argv = [config["jobtap"], "poke", "--site", config["site"], jid]
    env = dict(os.environ)
    if config.get("redis"):
        env["JOBTAP_REDIS"] = config["redis"]
    # `sh -c '... &'` returns at once and leaves no child behind in the server.
    command = " ".join("'%s'" % a.replace("'", "'\\''") for a in argv)
    subprocess.call(["/bin/sh", "-c", command + " >/dev/null 2>&1 &"], env=env)


def resp(*args):
    """One command in the Redis protocol."""
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        out.append(b"$%d\r\n" % len(data) + data + b"\r\n")
    return b"".join(out)


CERT_REQS = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def tls(sock, host, query):
    """The socket after a TLS handshake (bounded by the socket's timeout)."""
    try:
        reqs = CERT_REQS[query.get("ssl_cert_reqs", "required").lower()]
        context = ssl.create_default_context(cafile=query.get("ssl_ca_certs"),
                                             capath=query.get("ssl_ca_path"))
        context.check_hostname = (reqs != ssl.CERT_NONE and query.get(
            "ssl_check_hostname", "true").upper() not in ("0", "F", "FALSE", "N", "NO"))
        context.verify_mode = reqs
        if query.get("ssl_certfile"):
            context.load_cert_chain(query["ssl_certfile"], query.get("ssl_keyfile"))
        return context.wrap_socket(sock, server_hostname=host)
    except socket.timeout:
        sock.close()
        raise ValueError("no TLS handshake within %gs (a plain-text port? then use redis://)"
                         % sock.gettimeout())
    except Exception:
        sock.close()
        raise


def poke_now(config, jid):
    """XADD the poke over one short-lived connection; raises on any failure."""
    if not config.get("stream"):
        raise ValueError("no poke stream in the hook configuration")
    url = urlsplit(config.get("redis") or "redis://127.0.0.1:6379/0")
    if url.scheme not in ("redis", "rediss"):
        raise ValueError("the MoM hook speaks redis:// and rediss:// only, not %s" % url.scheme)
    commands = []
    if url.password:
        user = unquote(url.username) if url.username else None
        password = unquote(url.password)
        commands.append(resp("AUTH", user, password) if user else resp("AUTH", password))
    db = url.path.lstrip("/") or "0"
    if db != "0":
        commands.append(resp("SELECT", db))
    commands.append(resp("XADD", config["stream"], "MAXLEN", "~", config["maxlen"], "*",
                         "ids", jid, "source", socket.gethostname(), "ended", "1"))
    timeout = float(config.get("timeout") or 0.25)
    host = url.hostname or "127.0.0.1"
    sock = socket.create_connection((host, url.port or 6379), timeout)
    if url.scheme == "rediss":
        sock = tls(sock, host, dict(parse_qsl(url.query)))
    try:
        replies = sock.makefile("rb")
        for command in commands:  # one at a time: no XADD as the default user after a bad AUTH
            sock.sendall(command)
            line = replies.readline()
            if line[:1] == b"-":
                raise ValueError(line[1:].strip().decode("utf-8", "replace"))
            if line[:1] == b"$":  # the XADD reply: the entry id
                replies.readline()
            elif not line:
                raise ValueError("connection closed by Redis")
    finally:
        sock.close()


def main():
    event = pbs.event()
    try:
        jid = job_id(event)
        if jid:
            config = load_config()
            if on_execution_host(event):
                poke_now(config, jid)
            else:
                poke_in_background(config, jid)
    except Exception as exc:  # never let jobtap get in the way of a job
        pbs.logmsg(pbs.LOG_DEBUG, "jobtap poke hook: %s" % exc)
    event.accept()


main()

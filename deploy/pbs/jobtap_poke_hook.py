# PBS Pro / OpenPBS hook: tell jobtap's collector (follow mode) that a job just
# changed, so it refreshes the job at once instead of at the next poll.
# Installed by deploy/pbs/install-hook.sh (see deploy/pbs/README.md) as two hooks
# with this same file and the same configuration:
#
# * jobtap_poke, a server hook on runjob, modifyjob and jobobit: it writes the
#   poke itself (a few lines of the Redis protocol over one short connection,
#   waiting at most "timeout" seconds: the server runs hooks in its own process,
#   so nothing here may block it for long) and accepts the event.  On jobobit
#   the poke carries the job's final record (the field "record": the job as
#   `qstat -x -f -F json` will print it once the server has moved it to
#   history, built from pbs.event().job, see final_record), so the collector
#   needs no qstat for the job's end.  A record it cannot build exactly, or one
#   longer than "max_record" bytes, is left out: the collector then asks qstat
#   as before.  A configuration without "stream" (written before the hook wrote
#   pokes itself) makes it start `jobtap poke` in the background instead: a
#   Python process per event, which a burst of job starts turns into a queue of
#   processes (300 starts held jobobit's pokes back by over 30 s).
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
import re
import socket
import ssl
import subprocess
import time
from urllib.parse import parse_qsl, unquote, urlsplit

import pbs

DEFAULTS = {
    "jobtap": "/opt/jobtap/bin/jobtap",
    "site": "default",
    "redis": "",
    "stream": "",  # the site's poke stream key (install-hook.sh asks jobtap for it)
    "maxlen": 10000,
    "timeout": 0.25,
    "max_record": 8192,  # bytes of JSON; a longer record is not sent (qstat re-checks)
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


# The job's record as qstat prints it ---------------------------------------------
# The attributes `qstat -f -F json` prints, in the order it prints them: the
# order of the server's job attribute table (OpenPBS
# src/lib/Libattr/master_job_attr_def.xml), less the attributes no client may
# read (ATR_DFLAG_HIDDEN, or readable by the server only: interactive's cookie,
# exec_host2, hop_count, security, sample_starttime, job_kill_delay, node_set,
# prov_vnode, sched_preempted, last_context_refresh).  pbs.event().job holds
# every attribute of the table that is set (pbs_python_svr_internal.c
# encodes each with ATR_ENCODE_HOOK), so nothing qstat prints is out of reach.
QSTAT_ORDER = (
    "Job_Name", "Job_Owner", "resources_used", "job_state", "resv", "queue", "server",
    "Account_Name", "Checkpoint", "ctime", "depend", "Error_Path", "exec_host", "exec_vnode",
    "Execution_Time", "group_list", "Hold_Types", "interactive", "Join_Path", "Keep_Files",
    "Mail_Points", "Mail_Users", "mtime", "no_stdio_sockets", "Output_Path", "Priority",
    "qtime", "Remove_Files", "Rerunable", "Resource_List", "schedselect", "stime", "obittime",
    "session_id", "Shell_Path_List", "sandbox", "jobdir", "stagein", "stageout", "substate",
    "User_List", "Variable_List", "euser", "egroup", "hashname", "queue_rank", "queue_type",
    "sched_hint", "comment", "alt_id", "alt_id2", "etime", "reserve_ID", "gridname", "umask",
    "block", "cred", "run_count", "accounting_id", "eligible_time", "accrue_type",
    "Stageout_status", "Exit_status", "Submit_arguments", "executable", "argument_list",
    "array", "array_id", "array_index", "array_state_count", "array_indices_submitted",
    "array_indices_remaining", "estimated", "history_timestamp", "project",
    "forward_x11_cookie", "forward_x11_port", "run_version", "gui", "topjob",
    "topjob_ineligible", "resources_released", "resource_released_list",
    "release_nodes_on_stageout", "tolerate_node_failures", "Submit_Host", "credential_id",
    "credential_validity", "create_resv_from_job", "max_run_subjobs",
)  # fmt: skip
# Printed as ctime() text in qstat's local zone (qstat.c); history_timestamp stays a number.
TIMES = frozenset(("ctime", "etime", "stime", "obittime", "mtime", "qtime", "Execution_Time",
                   "credential_validity"))  # fmt: skip
STRINGS = frozenset(("Job_Name", "project", "Account_Name"))  # qstat never parses these
MAPPINGS = frozenset(("resources_used", "Resource_List", "estimated", "resource_released_list",
                      "Variable_List"))  # fmt: skip
# pbs.JOB_STATE_* (job.h; S and U: module_pbs_v1.c) -> the letter qstat prints
STATE_LETTERS = {0: "T", 1: "Q", 2: "H", 3: "W", 4: "R", 5: "E", 6: "X", 7: "B", 8: "M", 9: "F",
                 400: "S", 410: "U"}  # fmt: skip
SUBSTATE_TERMINATED, SUBSTATE_FINISHED, SUBSTATE_FAILED = 91, 92, 93
EXCEEDED = {
    -24: "ncpus (burst)",
    -25: "ncpus (sum)",
    -26: "vmem",
    -27: "mem",
    -28: "cput",
    -29: "walltime",
}  # JOB_EXEC_KILL_* (job.h): update_job_finish_comment()
_NUMBER = re.compile(r"^\s*-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?\s*$")
_ARGUMENT = re.compile(r"<jsdl-hpcpa:Argument>(.*?)</jsdl-hpcpa:Argument>", re.S)
_XML = (("&lt;", "<"), ("&gt;", ">"), ("&quot;", '"'), ("&apos;", "'"), ("&amp;", "&"))


def cjson_number(d):
    """A number as qstat's cJSON prints it (print_number): an int when it is
    one within C's int, else "%1.15g", or "%1.17g" when that does not read
    back the same (queue_rank 1795272020187830 prints as 1.79527202018783e+15,
    1795272020161111 in full); returned as the JSON reader gives it back."""
    if d == int(d) and -2147483648 <= d <= 2147483647:
        return int(d)
    token = "%1.15g" % d
    if float(token) != d:
        token = "%1.17g" % d
    return json.loads(token)


def qstat_value(text):
    """A value as qstat's JSON prints it: the text parsed as JSON when it is
    JSON (pbs_json_insert_parsed: "1" -> 1, "true" -> true), else the text."""
    if _NUMBER.match(text):
        return cjson_number(float(text))
    if text in ("true", "false", "null") or text[:1] in ("{", "[", '"'):
        try:
            return json.loads(text)
        except ValueError:
            pass
    return text


def qstat_time(seconds):
    return time.asctime(time.localtime(int(seconds)))  # ctime() without its newline


def submit_arguments(value):
    """qstat decodes the server's XML argument list (decode_xml_arg_list_str)."""
    args = _ARGUMENT.findall(value)
    if not args:
        return value
    out = []
    for arg in args:
        for old, new in _XML:
            arg = arg.replace(old, new)
        out.append(arg)
    return " ".join(out)


def mapping(name, value):
    """A resource list (pbs.pbs_resource: keys() and an attribute per resource,
    printed sorted as the server sends them) or Variable_List (pbs.pbs_env, a
    dict in the job's order) as qstat's object."""
    if isinstance(value, dict):
        items = [(k, value[k]) for k in value]
    else:
        items = [(k, getattr(value, k, None)) for k in sorted(value.keys())]
    return {k: qstat_value(str(v)) for k, v in items if v is not None}


def job_record(job):
    """pbs.event().job as `qstat -f -F json` prints the job now."""
    record = {}
    for name in QSTAT_ORDER:
        value = getattr(job, name, None)
        if value is None:
            continue
        if name in MAPPINGS:
            value = mapping(name, value)
            if not value:
                continue
        elif name == "job_state":
            value = STATE_LETTERS[int(value)] if not isinstance(value, str) else value
        elif name in TIMES:
            value = qstat_time(value)
        elif name in STRINGS:
            value = str(value)
        elif name == "Submit_arguments":
            value = qstat_value(submit_arguments(str(value)))
        elif isinstance(value, bool):
            value = "True" if value else "False"
        else:
            value = qstat_value(str(value))
        record[name] = value
    return record


def final_record(job, jid):
    """The record `qstat -x -f -F json` prints once the server has ended the job,
    or None when the hook cannot know it exactly.

    jobobit runs in end_job() (req_jobobit.c) after the server set obittime,
    Exit_status and resources_used, and before svr_saveorpurge_finjobhist()
    moves the job to history: that step (svr_setjob_histinfo) sets
    history_timestamp to the same second as obittime, job_state F (X for a
    subjob), substate 91 if deleted, 93 if Exit_status is not 0, else 92, and
    appends how the job ended to its comment (update_job_finish_comment); the
    save sets mtime to that second too.  This does the same.  Left to qstat:
    an array parent, a job without Exit_status or obittime, and a server
    without job history (the job is purged, qstat -x no longer shows it)."""
    if "[]" in jid:
        return None
    record = job_record(job)
    obit = getattr(job, "obittime", None)
    status = record.get("Exit_status")
    if obit is None or not isinstance(status, int):
        return None
    comment = record.get("comment")
    if isinstance(comment, str) and " and terminated" in comment:
        substate = SUBSTATE_TERMINATED  # qdel already said so (req_delete.c)
    elif status != 0:
        substate = SUBSTATE_FAILED
        if isinstance(comment, str):
            record["comment"] = "%s and %s" % (
                comment,
                "exceeded resource " + EXCEEDED[status] if status in EXCEEDED else "failed",
            )
    else:
        substate = SUBSTATE_FINISHED
        if isinstance(comment, str):
            record["comment"] = comment + " and finished"
    final = {}
    subjob = "[" in jid
    for name in QSTAT_ORDER:  # the history step's attributes, in their places
        if name == "job_state":
            final[name] = "X" if subjob else "F"
        elif name == "substate":
            final[name] = substate
        elif name == "mtime":
            final[name] = qstat_time(obit)
        elif name == "history_timestamp":
            final[name] = int(obit)
        elif name in record:
            final[name] = record[name]
    return final


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
        context = ssl.create_default_context(
            cafile=query.get("ssl_ca_certs"), capath=query.get("ssl_ca_path")
        )
        context.check_hostname = reqs != ssl.CERT_NONE and query.get(
            "ssl_check_hostname", "true"
        ).upper() not in ("0", "F", "FALSE", "N", "NO")
        context.verify_mode = reqs
        if query.get("ssl_certfile"):
            context.load_cert_chain(query["ssl_certfile"], query.get("ssl_keyfile"))
        return context.wrap_socket(sock, server_hostname=host)
    except socket.timeout:
        sock.close()
        raise ValueError(
            "no TLS handshake within %gs (a plain-text port? then use redis://)" % sock.gettimeout()
        ) from None
    except Exception:
        sock.close()
        raise


def poke_now(config, jid, **fields):
    """XADD the poke over one short-lived connection; raises on any failure.
    ``fields``: the entry's other fields (the MoM's "ended", jobobit's "record")."""
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
    extra = [part for item in sorted(fields.items()) for part in item]
    commands.append(
        resp(
            "XADD",
            config["stream"],
            "MAXLEN",
            "~",
            config["maxlen"],
            "*",
            "ids",
            jid,
            "source",
            socket.gethostname(),
            *extra,
        )
    )
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


def poke_with_record(config, event, jid):
    """jobobit: write the poke with the job's final record; False when there is
    no record to send (another event, a record the hook cannot build or too
    long, no stream configured), and the poke goes the usual way."""
    jobobit = getattr(pbs, "JOBOBIT", object())
    if getattr(event, "type", None) != jobobit or not config.get("stream"):
        return False
    try:
        record = final_record(event.job, jid)
    except Exception as exc:  # an attribute of a type this hook does not know
        pbs.logmsg(pbs.LOG_DEBUG, "jobtap poke hook: no record for %s: %s" % (jid, exc))
        return False
    if record is None:
        return False
    data = json.dumps(record, separators=(",", ":"), ensure_ascii=False)
    if len(data.encode()) > int(config.get("max_record", DEFAULTS["max_record"])):
        return False
    poke_now(config, jid, record=data)
    return True


def main():
    event = pbs.event()
    try:
        jid = job_id(event)
        if jid:
            config = load_config()
            if on_execution_host(event):
                poke_now(config, jid, ended="1")
            elif poke_with_record(config, event, jid):
                pass
            elif config.get("stream"):
                poke_now(config, jid)
            else:
                poke_in_background(config, jid)
    except Exception as exc:  # never let jobtap get in the way of a job
        pbs.logmsg(pbs.LOG_DEBUG, "jobtap poke hook: %s" % exc)
    event.accept()


main()

# PBS Pro / OpenPBS server hook: tell jobtap's collector (follow mode) that a job
# just changed, so its users hear about it in well under a second instead of at
# the next poll.  Install: see deploy/pbs/README.md.
#
# The hook never blocks or fails the server's work: it starts `jobtap poke` in
# the background and accepts the event whatever happens (the collector's
# periodic full stat catches anything a poke misses).
import json
import os
import subprocess

import pbs

DEFAULTS = {"jobtap": "/opt/jobtap/bin/jobtap", "site": "default", "redis": ""}


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


def poke(config, jid):
    argv = [config["jobtap"], "poke", "--site", config["site"]]
    if config.get("redis"):
        argv += ["--redis", config["redis"]]
    argv.append(jid)
    # `sh -c '... &'` returns at once and leaves no child behind in the server.
    command = " ".join("'%s'" % a.replace("'", "'\\''") for a in argv)
    subprocess.call(["/bin/sh", "-c", command + " >/dev/null 2>&1 &"])


def main():
    event = pbs.event()
    try:
        jid = job_id(event)
        if jid:
            poke(load_config(), jid)
    except Exception as exc:  # never let jobtap get in the way of a job
        pbs.logmsg(pbs.LOG_DEBUG, "jobtap poke hook: %s" % exc)
    event.accept()


main()

"""The scheduler hooks over TLS: the PBS MoM hook writes its poke itself with
Python's ssl module (it refused rediss:// before), verifying the server's
certificate; a wrong CA is one logged line and the event is still accepted.
(`jobtap poke`, which the PBS server hook and the Slurm scripts run, is in
test_pipeline.py, test_failures.py and test_cluster.py.)"""

from __future__ import annotations

from jobtap.keys import POKES_MAXLEN, SiteKeys
from sim.rig.pbs_hook import run_hook
from sim.rig.tls import tls_url

K = SiteKeys("hpc1")


def config(url: str) -> dict:
    return {"site": "hpc1", "redis": url, "stream": K.pokes, "maxlen": POKES_MAXLEN,
            "timeout": 2}  # fmt: skip


def test_mom_hook_pokes_over_tls(tls_redis, pki, tmp_path):
    url = tls_url(tls_redis.port, pki.ca.cert, cert=pki.service)
    run = run_hook(config(url), tmp_path / "hook.json", "EXECJOB_EPILOGUE", "42.server")
    assert run.accepted == [True] and run.logged == []
    with tls_redis.client() as r:
        ((_id, fields),) = r.xrange(K.pokes)
    assert fields[b"ids"] == b"42.server" and fields[b"ended"] == b"1"


def test_mom_hook_with_a_wrong_ca_logs_one_line(tls_redis, pki, tmp_path):
    url = tls_url(tls_redis.port, pki.other_ca.cert)
    run = run_hook(config(url), tmp_path / "hook.json", "EXECJOB_EPILOGUE", "43.server")
    assert run.accepted == [True]
    assert len(run.logged) == 1 and "CERTIFICATE_VERIFY_FAILED" in run.logged[0], run.logged
    with tls_redis.client() as r:
        assert r.xlen(K.pokes) == 0

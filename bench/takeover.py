"""How long a site has no active collector when the active one dies or pauses.

Two collector processes of one simulated site (sim/rig/standby.py: the
same simulated cluster on a shared clock, each named as a host of its own), a
real ``jobtap worker``, a fresh redis-server per round.  Each round the active
collector is either SIGKILLed right after a shipment (mid-burst, before it
noted anything) or SIGSTOPped with a shipment in hand; the takeover time is
from the signal to the standby holding the lease (read every 5 ms).  A stopped
one is then resumed: the round also counts the chunks the workers fenced and
checks that it stepped down.

    python -m bench.takeover [--rounds 3] [--interval 0.5] [--lease 1.5]

The lease defaults to 3 x the interval (at most 15 s), as ``jobtap collector``'s.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import tempfile
import time
from pathlib import Path

from jobtap.contract.lease import default_lease
from jobtap.sim.localredis import RedisServer
from sim.rig.pipeline import meta
from sim.rig.standby import SITE, Site, proc_state, wait_holder
from sim.rig.wait import eventually


def one_round(kind: str, workdir: Path, interval: float, lease: float) -> dict[str, float]:
    server = RedisServer(workdir / "redis").start()
    site = Site(server.url, workdir, freeze=120.0, interval=interval, lease=lease)
    try:
        site.start_worker()
        flag = workdir / kind
        a = site.start("hostA", f"--{kind}-file", str(flag))
        wait_holder(site, "hostA", timeout=60)
        site.start("hostB")
        eventually(lambda: "standby for site" in site.log("hostB"), timeout=60)
        time.sleep(2 * interval)  # a few cycles of the flow
        flag.touch()
        if kind == "kill":
            site.procs.pop("hostA")
            a.wait(60)
        else:
            eventually(lambda: proc_state(a.pid) == "T", timeout=60, interval=0.002)
        gone = time.monotonic()
        took = wait_holder(site, "hostB", timeout=lease + 30) - gone
        out = {"takeover_s": took}
        if kind == "pause":
            a.send_signal(signal.SIGCONT)
            eventually(lambda: "stepping down" in site.log("hostA"), timeout=30)
            eventually(lambda: int(meta(site.r, SITE).get("fenced_chunks") or 0) > 0, timeout=30)
            out["fenced"] = float(meta(site.r, SITE)["fenced_chunks"])
        return out
    finally:
        site.stop()
        server.stop()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--interval", type=float, default=0.5)
    p.add_argument("--lease", type=float, default=None)
    args = p.parse_args(argv)
    lease = args.lease or default_lease(args.interval)
    print(f"interval {args.interval:g} s, lease {lease:g} s (a standby polls every "
          f"{max(0.05, lease / 5):g} s, and just after the lease runs out)")  # fmt: skip
    for kind, what in (("kill", "SIGKILL right after a shipment"),
                       ("pause", "SIGSTOP with a shipment in hand")):  # fmt: skip
        times, fenced = [], []
        for n in range(args.rounds):
            with tempfile.TemporaryDirectory(prefix="jobtap-takeover-") as tmp:
                got = one_round(kind, Path(tmp), args.interval, lease)
            times.append(got["takeover_s"])
            if "fenced" in got:
                fenced.append(int(got["fenced"]))
            print(f"  {kind} round {n + 1}: takeover {got['takeover_s']:.2f} s"
                  + (f", {int(got['fenced'])} chunks of the paused one fenced" if "fenced" in got
                     else ""), flush=True)  # fmt: skip
        print(f"{what}: takeover median {statistics.median(times):.2f} s, "
              f"max {max(times):.2f} s over {len(times)} rounds (lease {lease:g} s)"
              + (f"; fenced chunks per round {fenced}" if fenced else ""))  # fmt: skip


if __name__ == "__main__":
    main()

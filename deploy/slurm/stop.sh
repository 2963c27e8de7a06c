#!/bin/bash
# Stop the single-host Slurm that deploy/slurm/start.sh started: cancel every job,
# stop the slurmd of n1..n4, slurmctld and slurmdbd, and munged and mariadbd only if
# start.sh started them (a MariaDB or munged that was already running is left alone).
#
#   sudo deploy/slurm/stop.sh            # stop the daemons, keep state and logs
#   sudo deploy/slurm/stop.sh --purge    # also delete $JOBTAP_SLURM_DIR (job ids restart at 1)
set -euo pipefail

STATE=${JOBTAP_SLURM_DIR:-/var/lib/jobtap-slurm}
RUN=$STATE/run
PURGE=
case "${1:-}" in
--purge) PURGE=1 ;;
"") ;;
*)
    echo "usage: $0 [--purge]" >&2
    exit 2
    ;;
esac

say() { echo "jobtap-slurm: $*"; }
[ "$(id -u)" = 0 ] || {
    echo "jobtap-slurm: ERROR: must run as root" >&2
    exit 1
}

alive() { # alive PIDFILE NAME
    local pid
    [ -s "$1" ] || return 1
    pid=$(cat "$1" 2>/dev/null) || return 1
    [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] && [ "$(cat "/proc/$pid/comm")" = "$2" ]
}

# stop PIDFILE NAME: SIGTERM, up to 15 s, then SIGKILL.
stop() {
    local pidfile=$1 name=$2 pid i
    alive "$pidfile" "$name" || return 0
    pid=$(cat "$pidfile")
    say "stopping $name (pid $pid)"
    kill "$pid" 2>/dev/null || return 0
    for i in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.3
    done
    say "$name (pid $pid) ignored SIGTERM: killing it"
    kill -9 "$pid" 2>/dev/null || true
}

# Jobs first, while slurmctld can still cancel them (their slurmstepd would outlive slurmd).
if alive "$RUN/slurmctld.pid" slurmctld; then
    jobs=$(timeout 10 squeue -h -t PD,R,S,CG,CF -o %A 2>/dev/null | sort -u | tr '\n' ' ' || true)
    if [ -n "${jobs// /}" ]; then
        say "cancelling jobs: $jobs"
        # shellcheck disable=SC2086
        timeout 10 scancel $jobs 2>/dev/null || true
        for _ in $(seq 30); do
            [ -z "$(timeout 5 squeue -h -t R,S,CG -o %A 2>/dev/null)" ] && break
            sleep 0.3
        done
    fi
fi

for pidfile in "$RUN"/slurmd-*.pid; do
    [ -e "$pidfile" ] && stop "$pidfile" slurmd
done
stop "$RUN/slurmctld.pid" slurmctld
stop "$RUN/slurmdbd.pid" slurmdbd

# Job step daemons of our slurmd that are still there: those whose root is the
# host's (another Slurm may run in a root of its own beside this one:
# deploy/slurm/debian13/start.sh; its slurmstepd are its own).
for pid in $(pgrep -x slurmstepd 2>/dev/null || true); do
    [ "$(readlink "/proc/$pid/root" 2>/dev/null)" = / ] || continue
    if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "slurmstepd"; then
        say "killing leftover slurmstepd (pid $pid)"
        kill -9 "$pid" 2>/dev/null || true
    fi
done

if [ -e "$RUN/started-mariadbd" ]; then
    stop "$RUN/mariadbd.pid" mariadbd
    rm -f "$RUN/started-mariadbd"
fi
if [ -e "$RUN/started-munged" ]; then
    stop /run/munge/munged.pid munged
    rm -f "$RUN/started-munged"
fi

if [ -n "$PURGE" ]; then
    say "deleting $STATE"
    rm -rf "$STATE"
fi
say "stopped"

#!/bin/bash
# Stop the Slurm 24.11 that deploy/slurm/debian13/start.sh started in its Debian 13
# root: cancel every job, stop the slurmd of m1..m4, slurmctld, slurmdbd and the
# root's munged (by their pid files), end whatever else still runs in the root (job
# steps, a hook's poke), stop mariadbd only if start.sh started it, and unmount the
# bind mounts (/proc, /sys, /dev, /dev/pts, /dev/shm, /tmp, the host's /etc).
#
#   sudo deploy/slurm/debian13/stop.sh                # stop, unmount; keep state and the root
#   sudo deploy/slurm/debian13/stop.sh --purge        # also delete the state: Slurm's state,
#                                                     # logs, wrappers, the slurm24_acct_db database
#   sudo deploy/slurm/debian13/stop.sh --purge-root   # --purge and delete the root itself
#                                                     # (the next start.sh debootstraps again)
#
# The 22.05 cluster of deploy/slurm/ is left alone.  Nothing is deleted while anything
# is still mounted under the root.  Environment: JOBTAP_SLURM24_DIR, JOBTAP_SLURM24_ROOT.
set -euo pipefail

STATE=${JOBTAP_SLURM24_DIR:-/var/lib/jobtap-slurm24}
ROOT=${JOBTAP_SLURM24_ROOT:-$STATE/root}
INNER=/var/lib/jobtap-slurm24
DB_NAME=slurm24_acct_db
PURGE= PURGE_ROOT=
for arg in "$@"; do
    case $arg in
    --purge) PURGE=1 ;;
    --purge-root) PURGE=1 PURGE_ROOT=1 ;;
    *)
        echo "usage: $0 [--purge] [--purge-root]" >&2
        exit 2
        ;;
    esac
done

say() { echo "jobtap-slurm24: $*"; }
die() {
    echo "jobtap-slurm24: ERROR: $*" >&2
    exit 1
}
[ "$(id -u)" = 0 ] || die "must run as root"

if [ ! -d "$ROOT" ]; then
    [ -n "$PURGE" ] && [ -d "$STATE" ] && { say "deleting $STATE"; rm -rf --one-file-system "$STATE"; }
    say "no root at $ROOT: nothing runs"
    exit 0
fi
ROOT=$(cd "$ROOT" && pwd -P)
[ "$ROOT" != / ] || die "the root cannot be /"
[ -d "$STATE" ] && STATE=$(cd "$STATE" && pwd -P)
RUN=$ROOT$INNER/run

alive() { # alive PIDFILE NAME: a live process of that name, in the root
    local pid
    [ -s "$1" ] || return 1
    pid=$(cat "$1" 2>/dev/null) || return 1
    [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] && [ "$(cat "/proc/$pid/comm")" = "$2" ] &&
        [ "$(readlink "/proc/$pid/root")" = "$ROOT" ]
}

# stop NAME PIDFILE...: SIGTERM to each live one at once, up to 15 s, then SIGKILL.
stop() {
    local name=$1 pidfile pid pids= left
    shift
    for pidfile in "$@"; do
        alive "$pidfile" "$name" || continue
        pid=$(cat "$pidfile")
        say "stopping $name (pid $pid)"
        kill "$pid" 2>/dev/null && pids="$pids $pid"
    done
    for _ in $(seq 150); do
        left=
        for pid in $pids; do kill -0 "$pid" 2>/dev/null && left=1; done
        [ -z "$left" ] && return 0
        sleep 0.1
    done
    for pid in $pids; do
        kill -0 "$pid" 2>/dev/null || continue
        say "$name (pid $pid) ignored SIGTERM: killing it"
        kill -9 "$pid" 2>/dev/null || true
    done
}

# Processes whose root is ours (all started from start.sh's daemons).
in_root_pids() {
    local d pid
    for d in /proc/[0-9]*; do
        pid=${d#/proc/}
        [ "$(readlink "$d/root" 2>/dev/null)" = "$ROOT" ] && echo "$pid"
    done
    return 0
}

ctl() { timeout 10 chroot "$ROOT" "$@"; }

# Jobs first, while slurmctld can still cancel them.
if alive "$RUN/slurmctld.pid" slurmctld; then
    jobs=$(ctl /usr/bin/squeue -h -t PD,R,S,CG,CF -o %A 2>/dev/null | sort -u | tr '\n' ' ' || true)
    if [ -n "${jobs// /}" ]; then
        say "cancelling jobs: $jobs"
        # shellcheck disable=SC2086
        ctl /usr/bin/scancel $jobs 2>/dev/null || true
        for _ in $(seq 30); do
            [ -z "$(ctl /usr/bin/squeue -h -t R,S,CG -o %A 2>/dev/null)" ] && break
            sleep 0.3
        done
    fi
fi

stop slurmd "$RUN"/slurmd-*.pid
stop slurmctld "$RUN/slurmctld.pid"
# slurmdbd and munged together (each takes about 2 s to go).
stop slurmdbd "$RUN/slurmdbd.pid" &
stop munged "$ROOT/run/munge/munged.pid"
wait

# Whatever still runs in the root (slurmstepd, a job's processes, a hook's poke).
left=$(in_root_pids | tr '\n' ' ')
if [ -n "${left// /}" ]; then
    say "ending processes left in the root: $left"
    # shellcheck disable=SC2086
    kill $left 2>/dev/null || true
    for _ in $(seq 20); do
        [ -z "$(in_root_pids)" ] && break
        sleep 0.2
    done
    left=$(in_root_pids | tr '\n' ' ')
    # shellcheck disable=SC2086
    [ -n "${left// /}" ] && kill -9 $left 2>/dev/null || true
fi

if [ -n "$PURGE" ]; then
    if mysql -uroot -e 'SELECT 1' >/dev/null 2>&1; then
        say "dropping the database $DB_NAME"
        mysql -uroot -e "DROP DATABASE IF EXISTS $DB_NAME" || true
    elif mysql -uroot -h127.0.0.1 -P3306 -e 'SELECT 1' >/dev/null 2>&1; then
        say "dropping the database $DB_NAME"
        mysql -uroot -h127.0.0.1 -P3306 -e "DROP DATABASE IF EXISTS $DB_NAME" || true
    fi
fi
if [ -e "$STATE/started-mariadbd" ]; then
    pid=$(cat "$STATE/mariadbd.pid" 2>/dev/null || true)
    if [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = mariadbd ]; then
        say "stopping mariadbd (pid $pid)"
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.3; done
    fi
    rm -f "$STATE/started-mariadbd"
fi

# Unmount, deepest first.
mounts_under() { awk -v r="$ROOT" 'index($5, r "/") == 1 {print $5}' /proc/self/mountinfo | sort -r; }
for m in $(mounts_under); do
    umount "$m" 2>/dev/null || { sleep 0.5; umount "$m" 2>/dev/null; } || {
        say "$m is busy: detaching it (umount -l)"
        umount -l "$m"
    }
done
[ -z "$(mounts_under)" ] || die "still mounted under $ROOT: $(mounts_under | tr '\n' ' ')"

if [ -n "$PURGE" ]; then
    say "deleting the state (Slurm's in $ROOT$INNER, wrappers and logs in $STATE)"
    rm -rf --one-file-system "${ROOT:?}$INNER"
    if [ -d "$STATE" ]; then
        find "$STATE" -mindepth 1 -maxdepth 1 ! -path "$ROOT" -exec rm -rf --one-file-system {} +
    fi
fi
if [ -n "$PURGE_ROOT" ]; then
    say "deleting the root $ROOT"
    rm -rf --one-file-system "$ROOT"
    rmdir "$STATE" 2>/dev/null || true
fi
say "stopped"

#!/bin/bash
# A single-host Slurm 24.11 (Debian 13 "trixie" packages, in a debootstrap root)
# beside the Debian 12 Slurm 22.05 of deploy/slurm/start.sh, for jobtap's tests and
# benchmarks against a current Slurm: cluster `jobtap24`, four node names m1..m4
# (one `slurmd -N mX` each, 4 CPUs each, NodeAddr 127.0.0.1, ports 17201-17204),
# partition `debug`, slurmctld on 17817, slurmdbd on 17819 with the host's MariaDB
# (127.0.0.1:3306, database slurm24_acct_db) so that `sacct --json` works, its own
# munged (own key, socket in the root's /run/munge), MinJobAge 10 s.
#
#   sudo deploy/slurm/debian13/start.sh    # make the root (once), configure, start; idempotent
#   sudo deploy/slurm/debian13/stop.sh     # stop what this script started, unmount
#   PATH=/var/lib/jobtap-slurm24/bin:$PATH squeue --json    # drive the 24.11 cluster
#
# A process that puts $STATE/bin first on PATH drives the 24.11 cluster: squeue
# sinfo sacct sacctmgr scontrol sbatch scancel sdiag srun salloc slurmrestd there
# are wrappers `chroot ROOT CMD "$@"` that keep the standard streams, the exit
# status, the environment and the working directory (when it exists in the root:
# the host's /tmp is bind-mounted there, so job scripts in /tmp work).  They must
# run as root (chroot), like the tests that submit as root.
#
# Runs as root on Debian 12 without systemd.  The first run installs debootstrap
# (apt) if missing and makes the root with `debootstrap --variant=minbase trixie`
# from the host's Debian mirror (its /etc/apt sources; JOBTAP_SLURM24_MIRROR
# overrides), then installs the Slurm packages inside with --no-install-recommends
# and a policy-rc.d that lets nothing start.  Every run bind-mounts /proc, /sys,
# /dev, /dev/pts, /dev/shm and /tmp into the root, and the host's /etc read-only
# at /run/jobtap-host-etc, with the root's /etc/jobtap a symlink to
# /run/jobtap-host-etc/jobtap: the host's /etc/jobtap/slurm24-hook.env (which the
# tests write, and may remove with its directory) is what the hook reads.  Daemons
# are started detached (setsid, descriptors closed, streams to log files), each
# only if it does not run; when everything runs already, it returns at once.
#
# PrologSlurmctld and EpilogSlurmctld run a copy of deploy/slurm/jobtap-slurmctld-hook.sh
# (/var/lib/jobtap-slurm24/hooks/ inside the root).  Its bash fast path (Redis over
# /dev/tcp: the root shares the host's network) works; its Python fallback does not:
# the checkout's .venv/bin/jobtap needs the host's Python (/usr/bin/python3.11 and
# its libraries), which the Debian 13 root has not, so a JOBTAP_BIN pointing at the
# host's jobtap fails in the root (exit 127) and such a poke is lost (the collector's
# next full stat still sees the change).  URLs other than redis://[user:pass@]host:port/db
# (TLS, Unix sockets) therefore get no poke on this cluster.
#
# Layout: the root in $ROOT; Slurm's own state, logs, pid files and spool inside
# it under /var/lib/jobtap-slurm24 (on the host: $ROOT/var/lib/jobtap-slurm24, with
# $STATE/log a symlink to its log dir); the wrappers in $STATE/bin.
#
# Environment: JOBTAP_SLURM24_DIR (state, default /var/lib/jobtap-slurm24),
# JOBTAP_SLURM24_ROOT (default $JOBTAP_SLURM24_DIR/root), JOBTAP_SLURM24_MIRROR,
# JOBTAP_SLURM_MIN_JOB_AGE (default 10), JOBTAP_SLURM_TIMEOUT (seconds to wait for
# each daemon, default 60).
set -euo pipefail

STATE=${JOBTAP_SLURM24_DIR:-/var/lib/jobtap-slurm24}
ROOT=${JOBTAP_SLURM24_ROOT:-$STATE/root}
MIN_JOB_AGE=${JOBTAP_SLURM_MIN_JOB_AGE:-10}
TIMEOUT=${JOBTAP_SLURM_TIMEOUT:-60}
SUITE=trixie
MARK="# Written by jobtap deploy/slurm/debian13/start.sh"
NODES="m1 m2 m3 m4"
NODE_PORT_BASE=17200 # m1 -> 17201 ... (22.05's n1..n4: 17101-17104)
CTLD_PORT=17817
DBD_PORT=17819
CLUSTER=jobtap24
ACCOUNT=lab
DB_NAME=slurm24_acct_db
DB_USER=slurm24
DB_PASS=jobtap-slurm24
INNER=/var/lib/jobtap-slurm24 # Slurm's state inside the root
HOST_ETC=/run/jobtap-host-etc # the host's /etc, read-only, inside the root
PACKAGES="slurmctld slurmd slurm-client slurmrestd slurmdbd slurm-wlm-mysql-plugin munge"
CLIENTS="squeue sinfo sacct sacctmgr scontrol sbatch scancel sdiag srun salloc slurmrestd"
T0=$(date +%s)

say() { echo "jobtap-slurm24 [$(($(date +%s) - T0))s]: $*"; }
die() {
    echo "jobtap-slurm24: ERROR: $*" >&2
    exit 1
}
# tail_log, close_fds, host_mariadb, accounting_db
# shellcheck source=deploy/slurm/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

[ "$(id -u)" = 0 ] || die "must run as root (it makes a root with debootstrap, mounts, starts daemons)"

mkdir -p "$STATE"
STATE=$(cd "$STATE" && pwd -P)
mkdir -p "$ROOT"
ROOT=$(cd "$ROOT" && pwd -P)
[ "$ROOT" != / ] || die "the root cannot be /"
BIN=$STATE/bin
HLOG=$STATE/log-setup # debootstrap and apt logs (outside the root: kept if it is remade)
RUN=$ROOT$INNER/run
LOG=$ROOT$INNER/log
HOOK_IN=$INNER/hooks/jobtap-slurmctld-hook.sh
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
DONE=$ROOT/.jobtap-slurm24-ready # written when debootstrap and the packages are done

in_root() { chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@"; }

# A daemon runs if its pid file names a live process with the expected name, in the root.
alive() { # alive PIDFILE NAME
    local pid
    [ -s "$1" ] || return 1
    pid=$(cat "$1" 2>/dev/null) || return 1
    [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] && [ "$(cat "/proc/$pid/comm")" = "$2" ] &&
        [ "$(readlink "/proc/$pid/root")" = "$ROOT" ]
}

wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...: run COMMAND until it succeeds
    local limit=$1 deadline
    shift 2
    deadline=$(($(date +%s) + limit))
    until "$@" >/dev/null 2>&1; do
        [ "$(date +%s)" -lt "$deadline" ] || return 1
        sleep 0.3
    done
}

# Start a program in the root, detached from us, its streams to a log file.
spawn() { # spawn LOGFILE COMMAND...
    local logfile=$1
    shift
    (
        close_fds
        exec setsid chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
            HOME=/root LANG=C.UTF-8 "$@" </dev/null >>"$logfile" 2>&1
    ) &
}

# Mounts -----------------------------------------------------------------------------
is_mount() { mountpoint -q "$1" 2>/dev/null; }
# same_dir A B: A and B are the same directory (a bind mount shows the same inode).
same_dir() { [ "$(stat -L -c %d:%i "$1" 2>/dev/null)" = "$(stat -L -c %d:%i "$2" 2>/dev/null)" ]; }
MOUNTS="/proc /sys /dev /dev/pts /dev/shm /tmp $HOST_ETC"
host_path() { case $1 in "$HOST_ETC") echo /etc ;; *) echo "$1" ;; esac; }
mounts_ok() {
    local m
    for m in $MOUNTS; do
        [ "$m" = /dev/shm ] && ! is_mount /dev/shm && continue
        is_mount "$ROOT$m" && same_dir "$ROOT$m" "$(host_path "$m")" || return 1
    done
}
do_mounts() {
    local m src
    for m in $MOUNTS; do
        src=$(host_path "$m")
        [ "$m" = /dev/shm ] && ! is_mount /dev/shm && continue
        is_mount "$ROOT$m" && same_dir "$ROOT$m" "$src" && continue
        mkdir -p "$ROOT$m"
        is_mount "$ROOT$m" && umount -l "$ROOT$m" # a stale mount (its source was replaced)
        mount --bind "$src" "$ROOT$m" || die "cannot bind-mount $src on $ROOT$m"
        # The host's /etc: read-only (only /etc/jobtap is wanted, through a symlink).
        if [ "$m" = "$HOST_ETC" ]; then
            mount -o remount,bind,ro "$ROOT$m" || die "cannot make $ROOT$m read-only"
        fi
    done
    # /etc/jobtap in the root is the host's, even after the host's is removed and made again.
    if [ ! -L "$ROOT/etc/jobtap" ]; then
        rmdir "$ROOT/etc/jobtap" 2>/dev/null || true
        [ -e "$ROOT/etc/jobtap" ] && die "$ROOT/etc/jobtap exists and is not this script's symlink"
        ln -s "$HOST_ETC/jobtap" "$ROOT/etc/jobtap"
    fi
}

# The configuration -----------------------------------------------------------------
HOST=$(hostname -s)
[ -n "$HOST" ] || die "hostname -s printed nothing"

slurm_conf() {
    echo "$MARK; edits are overwritten."
    cat <<EOF
ClusterName=$CLUSTER
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$INNER/ctld
SlurmdSpoolDir=$INNER/spool/%n
SlurmctldPidFile=$INNER/run/slurmctld.pid
SlurmdPidFile=$INNER/run/slurmd-%n.pid
SlurmctldLogFile=$INNER/log/slurmctld.log
SlurmdLogFile=$INNER/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups here: track processes through /proc, bind nothing.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=2
ReturnToService=2
MailProg=/bin/true
# Finished jobs leave squeue MinJobAge seconds after they end (default 300).
MinJobAge=$MIN_JOB_AGE
MaxJobCount=20000
KillWait=2
InactiveLimit=0
SlurmdTimeout=120
# Node names share this host; config_overrides lets them claim more CPUs than it has.
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
# jobtap follow mode: the same script as JobCompLoc pokes with the job's
# completion record (jobcomp/script), a final that needs no read.
JobCompType=jobcomp/script
JobCompLoc=$HOOK_IN
# jobtap follow mode (a no-op without /etc/jobtap/slurm24-hook.env, the host's).
PrologSlurmctld=$HOOK_IN
EpilogSlurmctld=$HOOK_IN
EOF
    local port=$NODE_PORT_BASE n
    for n in $NODES; do
        port=$((port + 1))
        echo "NodeName=$n NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$port CPUs=4 RealMemory=1000 State=UNKNOWN"
    done
    echo "PartitionName=debug Nodes=m[1-4] Default=YES MaxTime=INFINITE State=UP"
}

slurmdbd_conf() {
    echo "$MARK; edits are overwritten."
    cat <<EOF
AuthType=auth/munge
DbdHost=$HOST
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
LogFile=$INNER/log/slurmdbd.log
PidFile=$INNER/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=3306
StorageUser=$DB_USER
StoragePass=$DB_PASS
StorageLoc=$DB_NAME
EOF
}

cgroup_conf() {
    echo "$MARK; edits are overwritten."
    echo "CgroupPlugin=disabled"
}

# install_conf NEW PATH MODE: move NEW to PATH unless equal; returns 0 if PATH changed.
install_conf() {
    local new=$1 path=$2 mode=$3
    chmod "$mode" "$new"
    if [ -f "$path" ] && ! head -n 1 "$path" | grep -qF "$MARK"; then
        rm -f "$new"
        die "$path exists and was not written by this script: move it away first"
    fi
    if [ -f "$path" ] && cmp -s "$new" "$path"; then
        rm -f "$new"
        return 1
    fi
    mv -f "$new" "$path"
}

# The hook, with no Python fallback in the root (see the header), and settings of
# its own: 22.05's hook reads /etc/jobtap/slurm-hook.env, and tests of the two
# clusters running side by side must not poke each other's Redis.
HOOK_ENV_FILE=/etc/jobtap/slurm24-hook.env
hook_text() {
    sed -e "s|^DEFAULT_BIN=.*|DEFAULT_BIN=/usr/local/bin/jobtap # absent in the Debian 13 root: no Python fallback (deploy/slurm/debian13/start.sh)|" \
        -e "s|^ENV_FILE=.*|ENV_FILE=\${JOBTAP_HOOK_ENV:-$HOOK_ENV_FILE}|" \
        "$REPO/deploy/slurm/jobtap-slurmctld-hook.sh"
}

# The client wrappers: chroot ROOT CMD "$@", in the caller's directory when the root has it.
wrapper_text() { # wrapper_text CMD
    local path=/usr/bin/$1
    [ "$1" = slurmrestd ] && path=/usr/sbin/slurmrestd
    cat <<EOF
#!/bin/sh
# $1 of the Slurm 24.11 cluster in $ROOT (deploy/slurm/debian13/start.sh).
# Put $BIN first on PATH to drive that cluster; runs as root (chroot).
exec chroot '$ROOT' /bin/sh -c 'cd "\$1" 2>/dev/null || cd /; shift; exec "\$@"' sh "\$PWD" $path "\$@"
EOF
}
write_wrappers() {
    local c
    mkdir -p "$BIN"
    for c in $CLIENTS; do
        if ! wrapper_text "$c" | cmp -s - "$BIN/$c"; then
            wrapper_text "$c" >"$BIN/$c.new"
            chmod 755 "$BIN/$c.new"
            mv -f "$BIN/$c.new" "$BIN/$c"
        fi
    done
}

all_running() {
    [ -e "$DONE" ] && mounts_ok || return 1
    alive "$ROOT/run/munge/munged.pid" munged || return 1
    alive "$RUN/slurmctld.pid" slurmctld || return 1
    alive "$RUN/slurmdbd.pid" slurmdbd || return 1
    for n in $NODES; do alive "$RUN/slurmd-$n.pid" slurmd || return 1; done
    slurm_conf | cmp -s - "$ROOT/etc/slurm/slurm.conf" || return 1
    slurmdbd_conf | cmp -s - "$ROOT/etc/slurm/slurmdbd.conf" || return 1
    hook_text | cmp -s - "$ROOT$HOOK_IN" || return 1
    timeout 10 chroot "$ROOT" /usr/bin/sinfo -h -o %P >/dev/null 2>&1
}

if all_running; then
    write_wrappers
    say "already running (munged, slurmdbd, slurmctld, slurmd ${NODES// /,}); logs in $LOG"
    say "clients: put $BIN first on PATH"
    exit 0
fi

# 1. The Debian 13 root (once) ---------------------------------------------------------
mirror() {
    local m
    if [ -n "${JOBTAP_SLURM24_MIRROR:-}" ]; then
        echo "$JOBTAP_SLURM24_MIRROR"
        return
    fi
    # The first Debian archive (not -security) the host's apt sources name.
    m=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null |
        sed -n 's/^[[:space:]]*//; /^#/d; s/^URIs:[[:space:]]*//p; s/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?//p' |
        tr ' ' '\n' | grep -E '^https?://[^ ]*/debian/?$' | head -n 1 || true)
    echo "${m:-http://deb.debian.org/debian}"
}

# Leftover mounts under a path (a debootstrap that died keeps /proc and /sys mounted).
umount_under() {
    local p
    for p in $(awk -v r="$1" '$5 == r || index($5, r "/") == 1 {print $5}' /proc/self/mountinfo | sort -r); do
        umount "$p" 2>/dev/null || umount -l "$p"
    done
}

if [ ! -e "$DONE" ]; then
    mkdir -p "$HLOG"
    if ! command -v debootstrap >/dev/null; then
        say "installing debootstrap (apt-get)"
        host_apt install -y -q --no-install-recommends debootstrap >>"$HLOG/apt-host.log" 2>&1 ||
            { host_apt update -q >>"$HLOG/apt-host.log" 2>&1 &&
                host_apt install -y -q --no-install-recommends debootstrap \
                    >>"$HLOG/apt-host.log" 2>&1; } || {
            tail_log "$HLOG/apt-host.log"
            die "cannot install debootstrap; see $HLOG/apt-host.log"
        }
    fi
    if [ ! -x "$ROOT/usr/bin/apt-get" ] || [ ! -e "$ROOT/.jobtap-debootstrap-done" ]; then
        MIRROR=$(mirror)
        say "making a Debian 13 root in $ROOT (debootstrap --variant=minbase $SUITE $MIRROR)"
        umount_under "$ROOT"
        # A half-made root from an interrupted run: start again (on this file system only).
        [ -z "$(awk -v r="$ROOT" 'index($5, r "/") == 1' /proc/self/mountinfo)" ] ||
            die "something is still mounted under $ROOT: not deleting a half-made root"
        if [ -n "$(ls -A "$ROOT")" ] && [ ! -d "$ROOT/debootstrap" ] && [ ! -e "$ROOT/.jobtap-debootstrap-done" ]; then
            die "$ROOT is not empty and is not a root this script began: move it away or set JOBTAP_SLURM24_ROOT"
        fi
        find "$ROOT" -mindepth 1 -maxdepth 1 -exec rm -rf --one-file-system {} +
        if ! debootstrap --variant=minbase "$SUITE" "$ROOT" "$MIRROR" >>"$HLOG/debootstrap.log" 2>&1; then
            umount_under "$ROOT"
            tail_log "$HLOG/debootstrap.log"
            tail_log "$ROOT/debootstrap/debootstrap.log"
            die "debootstrap $SUITE from $MIRROR failed; see $HLOG/debootstrap.log"
        fi
        umount_under "$ROOT"
        touch "$ROOT/.jobtap-debootstrap-done"
    fi
    # Installing must start nothing (every daemon is started below, by hand).
    printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"
    chmod 755 "$ROOT/usr/sbin/policy-rc.d"
    cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf" 2>/dev/null || true
    cp /etc/hosts "$ROOT/etc/hosts"
    do_mounts
    say "installing $PACKAGES in the root (apt-get, --no-install-recommends)"
    root_apt() {
        chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
            DEBIAN_FRONTEND=noninteractive "$@" >>"$HLOG/apt.log" 2>&1
    }
    root_apt apt-get update -q || {
        tail_log "$HLOG/apt.log"
        die "apt-get update in the root failed; see $HLOG/apt.log"
    }
    # shellcheck disable=SC2086
    root_apt apt-get install -y -q --no-install-recommends $PACKAGES || {
        tail_log "$HLOG/apt.log"
        die "apt-get install $PACKAGES in the root failed; see $HLOG/apt.log"
    }
    root_apt apt-get clean || true
    rm -rf "$ROOT"/var/lib/apt/lists/* # 90 MB; a later install runs apt-get update first
    for f in /usr/sbin/slurmctld /usr/sbin/slurmd /usr/sbin/slurmdbd /usr/sbin/slurmrestd \
        /usr/bin/sbatch /usr/bin/sacct /usr/sbin/munged; do
        # (test in the root: slurmctld, slurmd and slurmstepd are alternatives, absolute symlinks)
        chroot "$ROOT" /usr/bin/test -x "$f" || die "packages installed but $f is missing in the root"
    done
    ls "$ROOT"/usr/lib/*/slurm-wlm/accounting_storage_mysql.so >/dev/null 2>&1 ||
        die "packages installed but the accounting_storage/mysql plugin is missing in the root"
    touch "$DONE"
    say "root ready ($(du -sh --one-file-system --exclude="$ROOT/tmp" --exclude="$ROOT$HOST_ETC" "$ROOT" | cut -f1))"
fi

# 2. Mounts, directories, configuration --------------------------------------------------
do_mounts
write_wrappers
mkdir -p "$RUN" "$LOG" "$ROOT$INNER/ctld" "$ROOT$INNER/hooks" "$ROOT/etc/slurm"
for n in $NODES; do mkdir -p "$ROOT$INNER/spool/$n"; done
ln -sfn "$LOG" "$STATE/log"

hook_text >"$ROOT$HOOK_IN.new" || die "cannot write $ROOT$HOOK_IN"
chmod 755 "$ROOT$HOOK_IN.new"
if cmp -s "$ROOT$HOOK_IN.new" "$ROOT$HOOK_IN"; then rm -f "$ROOT$HOOK_IN.new"; else mv -f "$ROOT$HOOK_IN.new" "$ROOT$HOOK_IN"; fi

# Daemons running with an older configuration are stopped here and started below.
stale=
slurm_conf >"$STATE/slurm.conf.new"
if install_conf "$STATE/slurm.conf.new" "$ROOT/etc/slurm/slurm.conf" 644; then
    say "configuration written to $ROOT/etc/slurm/slurm.conf"
    stale="$RUN/slurmctld.pid $(echo "$RUN"/slurmd-*.pid)"
fi
cgroup_conf >"$STATE/cgroup.conf.new"
install_conf "$STATE/cgroup.conf.new" "$ROOT/etc/slurm/cgroup.conf" 644 || true
slurmdbd_conf >"$STATE/slurmdbd.conf.new"
if install_conf "$STATE/slurmdbd.conf.new" "$ROOT/etc/slurm/slurmdbd.conf" 600; then
    say "configuration written to $ROOT/etc/slurm/slurmdbd.conf"
    stale="$stale $RUN/slurmdbd.pid"
fi
pids=
for f in $stale; do
    name=$(basename "$f" .pid)
    name=${name%%-*}
    if alive "$f" "$name"; then
        say "restarting $(basename "$f" .pid) (configuration changed)"
        pid=$(cat "$f")
        kill "$pid" 2>/dev/null || true
        pids="$pids $pid"
    fi
done
for pid in $pids; do
    wait_for 20 "exit" sh -c "! kill -0 $pid" || kill -9 "$pid" 2>/dev/null || true
done

# 3. munge (the root's own key and socket) ------------------------------------------------
munge_works() { in_root sh -c 'munge -n </dev/null | unmunge' >/dev/null 2>&1; }
if ! alive "$ROOT/run/munge/munged.pid" munged || ! munge_works; then
    if [ ! -s "$ROOT/etc/munge/munge.key" ]; then
        say "creating the root's /etc/munge/munge.key"
        in_root mungekey --create --keyfile=/etc/munge/munge.key >>"$LOG/munged.out" 2>&1 ||
            dd if=/dev/urandom of="$ROOT/etc/munge/munge.key" bs=1024 count=1 2>/dev/null
    fi
    in_root sh -c 'mkdir -p /run/munge /var/lib/munge /var/log/munge &&
        chown munge:munge /etc/munge /etc/munge/munge.key /run/munge /var/lib/munge /var/log/munge &&
        chmod 700 /etc/munge && chmod 400 /etc/munge/munge.key && chmod 755 /run/munge' ||
        die "cannot prepare munge's directories in the root"
    say "starting munged"
    # munged refuses to run as root; it daemonizes itself.
    if ! (close_fds && exec chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
        runuser -u munge -- /usr/sbin/munged </dev/null >>"$LOG/munged.out" 2>&1); then
        tail_log "$LOG/munged.out"
        tail_log "$ROOT/var/log/munge/munged.log"
        die "munged did not start"
    fi
    wait_for 10 munge munge_works || {
        tail_log "$ROOT/var/log/munge/munged.log"
        die "munged started but munge -n | unmunge fails in the root"
    }
fi

# 4. MariaDB (the host's) -------------------------------------------------------------------
MYSQL_ADMIN=
if ! mysql_admin && [ ! -x /usr/sbin/mariadbd ]; then
    say "installing mariadb-server on the host (apt-get)"
    host_apt install -y -q --no-install-recommends mariadb-server mariadb-client \
        >>"$HLOG/apt-host.log" 2>&1 || {
        tail_log "$HLOG/apt-host.log"
        die "cannot install mariadb-server on the host"
    }
fi
# As deploy/slurm/start.sh does (its stop.sh does not know of this one: ours stops it).
host_mariadb "$STATE" "$STATE"
accounting_db "$DB_NAME" "$DB_USER" "$DB_PASS"

# 5. slurmdbd -------------------------------------------------------------------------------
dbd_answers() { timeout 10 chroot "$ROOT" /usr/bin/sacctmgr -n -P list cluster format=cluster; }
if ! alive "$RUN/slurmdbd.pid" slurmdbd; then
    say "starting slurmdbd"
    spawn "$LOG/slurmdbd.out" /usr/sbin/slurmdbd
fi
wait_for "$TIMEOUT" slurmdbd dbd_answers || {
    tail_log "$LOG/slurmdbd.log"
    tail_log "$LOG/slurmdbd.out" 5
    die "slurmdbd did not answer within ${TIMEOUT}s"
}

# The cluster, an account and root in it (each command is a no-op when done).
if ! dbd_answers 2>/dev/null | grep -qx "$CLUSTER"; then
    say "registering cluster $CLUSTER, account $ACCOUNT and user root in $DB_NAME"
    in_root sacctmgr -i add cluster "$CLUSTER" >>"$LOG/sacctmgr.log" 2>&1 || true
fi
if ! timeout 10 chroot "$ROOT" /usr/bin/sacctmgr -n -P list account "$ACCOUNT" format=account 2>/dev/null |
    grep -qx "$ACCOUNT"; then
    in_root sacctmgr -i add account "$ACCOUNT" Cluster="$CLUSTER" Description=jobtap Organization=jobtap \
        >>"$LOG/sacctmgr.log" 2>&1 || true
    in_root sacctmgr -i add user root Account="$ACCOUNT" DefaultAccount="$ACCOUNT" \
        >>"$LOG/sacctmgr.log" 2>&1 || true
fi

# 6. slurmctld ------------------------------------------------------------------------------
ctld_answers() { timeout 5 chroot "$ROOT" /usr/bin/scontrol ping | grep -q UP; }
if ! alive "$RUN/slurmctld.pid" slurmctld; then
    say "starting slurmctld"
    spawn "$LOG/slurmctld.out" /usr/sbin/slurmctld
fi
wait_for "$TIMEOUT" slurmctld ctld_answers || {
    tail_log "$LOG/slurmctld.log"
    tail_log "$LOG/slurmctld.out" 5
    die "slurmctld did not start within ${TIMEOUT}s"
}

# 7. slurmd, one per node name --------------------------------------------------------------
for n in $NODES; do
    if ! alive "$RUN/slurmd-$n.pid" slurmd; then
        say "starting slurmd -N $n"
        spawn "$LOG/slurmd-$n.out" /usr/sbin/slurmd -N "$n"
    fi
done

node_states() { timeout 5 chroot "$ROOT" /usr/bin/sinfo -h -N -o '%N %T' 2>/dev/null | sort -u; }
# Wait for m1..m4 to be up; nodes an earlier run left drained or down are resumed.
resumed=
deadline=$(($(date +%s) + TIMEOUT))
while :; do
    states=$(node_states || true)
    good=$(echo "$states" | grep -cE ' (idle|mixed|allocated|completing)$' || true)
    [ "$good" -eq 4 ] && break
    if [ "$(date +%s)" -ge "$deadline" ]; then
        echo "$states" | sed 's/^/    | /' >&2
        for n in $NODES; do tail_log "$LOG/slurmd-$n.log" 5; done
        die "nodes m1..m4 did not become idle within ${TIMEOUT}s"
    fi
    for n in $(echo "$states" | awk '$2 ~ /^(drain|drained|draining|down|fail)$/ {print $1}'); do
        case " $resumed " in *" $n "*) continue ;; esac
        say "resuming $n (left $(echo "$states" | awk -v n="$n" '$1 == n {print $2}') by an earlier run)"
        in_root scontrol update nodename="$n" state=resume >/dev/null 2>&1 || true
        resumed="$resumed $n"
    done
    sleep 0.3
done

say "ready: Slurm $(in_root sinfo -V 2>/dev/null | awk '{print $2}'), cluster $CLUSTER, nodes $(echo $NODES), partition debug, MinJobAge ${MIN_JOB_AGE}s; logs in $LOG"
say "clients: put $BIN first on PATH (a process that does drives this cluster)"

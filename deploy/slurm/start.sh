#!/bin/bash
# A single-host Slurm 22.05 (Debian 12 packages) for jobtap's tests and benchmarks:
# four node names n1..n4 (one `slurmd -N nX` each, 4 CPUs each, NodeAddr 127.0.0.1,
# ports 17101-17104), partition `debug`, accounting through slurmdbd + MariaDB so
# that `sacct --json` works, MinJobAge 10 s so that finished jobs leave `squeue`
# quickly.
#
#   sudo deploy/slurm/start.sh        # install (apt), configure, start; idempotent
#   sudo deploy/slurm/stop.sh         # stop what this script started
#
# Runs as root on Debian 12 without systemd: every daemon is started by hand, with
# its standard streams redirected to log files (a daemon holding its caller's pipe
# would hang whoever captures this script's output).  When everything already
# runs, it returns at once.  State, logs and pid files live in $JOBTAP_SLURM_DIR
# (default /var/lib/jobtap-slurm); the configuration in /etc/slurm (a file there
# that this script did not write is never overwritten).
#
# PrologSlurmctld, EpilogSlurmctld and JobCompLoc (jobcomp/script) run
# jobtap-slurmctld-hook.sh (installed as
# $JOBTAP_SLURM_DIR/hooks/jobtap-slurmctld-hook.sh, its default jobtap command being
# this checkout's .venv/bin/jobtap): `jobtap poke` for follow mode when
# /etc/jobtap/slurm-hook.env exists, nothing otherwise (docs/slurm.md, "Follow mode").
#
# Environment: JOBTAP_SLURM_DIR, JOBTAP_SLURM_MIN_JOB_AGE (default 10),
# JOBTAP_SLURM_TIMEOUT (seconds to wait for each daemon, default 60).
set -euo pipefail

STATE=${JOBTAP_SLURM_DIR:-/var/lib/jobtap-slurm}
MIN_JOB_AGE=${JOBTAP_SLURM_MIN_JOB_AGE:-10}
TIMEOUT=${JOBTAP_SLURM_TIMEOUT:-60}
CONF_DIR=/etc/slurm
MARK="# Written by jobtap deploy/slurm/start.sh"
NODES="n1 n2 n3 n4"
NODE_PORT_BASE=17100 # n1 -> 17101 ... (OpenPBS's pbs_comm uses 17001)
CLUSTER=jobtap
ACCOUNT=lab
DB_NAME=slurm_acct_db
DB_USER=slurm
DB_PASS=jobtap-slurm
# slurmrestd: run by the collector in inetd mode for the records of a few jobs.
PACKAGES="slurm-wlm munge slurmdbd slurm-wlm-mysql-plugin mariadb-server slurmrestd"
T0=$(date +%s)

say() { echo "jobtap-slurm [$(($(date +%s) - T0))s]: $*"; }
die() {
    echo "jobtap-slurm: ERROR: $*" >&2
    exit 1
}
# tail_log, close_fds, host_mariadb, accounting_db
# shellcheck source=deploy/slurm/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# A daemon runs if its pid file names a live process with the expected name.
alive() { # alive PIDFILE NAME
    local pid
    [ -s "$1" ] || return 1
    pid=$(cat "$1" 2>/dev/null) || return 1
    [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] && [ "$(cat "/proc/$pid/comm")" = "$2" ]
}

# wait_for SECONDS DESCRIPTION COMMAND...: run COMMAND until it succeeds.
wait_for() {
    local limit=$1 what=$2 deadline
    shift 2
    deadline=$(($(date +%s) + limit))
    until "$@" >/dev/null 2>&1; do
        [ "$(date +%s)" -lt "$deadline" ] || return 1
        sleep 0.3
    done
}

# Start a program detached from us, its streams to a log file.
spawn() { # spawn LOGFILE COMMAND...
    local logfile=$1
    shift
    (
        close_fds
        exec setsid "$@" </dev/null >>"$logfile" 2>&1
    ) &
}

[ "$(id -u)" = 0 ] || die "must run as root (it installs packages and starts daemons)"

RUN=$STATE/run
LOG=$STATE/log
HOOK=$STATE/hooks/jobtap-slurmctld-hook.sh
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

all_running() {
    alive "$RUN/slurmctld.pid" slurmctld || return 1
    alive "$RUN/slurmdbd.pid" slurmdbd || return 1
    for n in $NODES; do alive "$RUN/slurmd-$n.pid" slurmd || return 1; done
    command -v sinfo >/dev/null && timeout 10 sinfo -h -o %P >/dev/null 2>&1
}

# The configuration (written in step 2) ------------------------------------------
HOST=$(hostname -s)
[ -n "$HOST" ] || die "hostname -s printed nothing"

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

slurm_conf() {
    echo "$MARK; edits are overwritten."
    cat <<EOF
ClusterName=$CLUSTER
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=6817
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool/%n
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd-%n.log
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
# Room for the 10,000 queued jobs of bench/slurm_polling.py (default 10000).
MaxJobCount=20000
KillWait=2
InactiveLimit=0
SlurmdTimeout=120
# Node names share this host; config_overrides lets them claim more CPUs than it has.
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=6819
# jobtap follow mode: the same script as JobCompLoc pokes with the job's
# completion record (jobcomp/script), a final that needs no read.
JobCompType=jobcomp/script
JobCompLoc=$HOOK
# jobtap follow mode: jobtap poke when a job starts and when it ends (a no-op
# without /etc/jobtap/slurm-hook.env; the script always exits 0 at once).
PrologSlurmctld=$HOOK
EpilogSlurmctld=$HOOK
EOF
    local port=$NODE_PORT_BASE n
    for n in $NODES; do
        port=$((port + 1))
        echo "NodeName=$n NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$port CPUs=4 RealMemory=1000 State=UNKNOWN"
    done
    echo "PartitionName=debug Nodes=n[1-4] Default=YES MaxTime=INFINITE State=UP"
}

slurmdbd_conf() {
    echo "$MARK; edits are overwritten."
    cat <<EOF
AuthType=auth/munge
DbdHost=$HOST
DbdAddr=127.0.0.1
DbdPort=6819
SlurmUser=root
LogFile=$LOG/slurmdbd.log
PidFile=$RUN/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=3306
StorageUser=$DB_USER
StoragePass=$DB_PASS
StorageLoc=$DB_NAME
EOF
}

# The follow-mode hook that slurm.conf names, with this checkout's jobtap as its
# default command.  Replaced in place when it changed (slurmctld runs the file
# anew for every job: no restart needed); it must exist before slurmctld starts
# jobs, or they fail their PrologSlurmctld.
install_hook() {
    local bin=$REPO/.venv/bin/jobtap
    [ -x "$bin" ] || bin=$(command -v jobtap || echo /usr/local/bin/jobtap)
    mkdir -p "$STATE/hooks"
    sed "s|^DEFAULT_BIN=.*|DEFAULT_BIN=$bin # written by deploy/slurm/start.sh|" \
        "$REPO/deploy/slurm/jobtap-slurmctld-hook.sh" >"$HOOK.new" || die "cannot write $HOOK"
    chmod 755 "$HOOK.new"
    if cmp -s "$HOOK.new" "$HOOK"; then
        rm -f "$HOOK.new"
    else
        mv -f "$HOOK.new" "$HOOK"
    fi
}
install_hook

# Everything runs with the configuration this script would write: nothing to do.
if [ -f "$CONF_DIR/slurm.conf" ] && [ -f "$CONF_DIR/slurmdbd.conf" ] &&
    slurm_conf | cmp -s - "$CONF_DIR/slurm.conf" &&
    slurmdbd_conf | cmp -s - "$CONF_DIR/slurmdbd.conf" && all_running; then
    say "already running (slurmctld, slurmdbd, slurmd ${NODES// /,}); logs in $LOG"
    exit 0
fi

# 1. Packages ----------------------------------------------------------------------
need_install() {
    local f
    for f in /usr/sbin/slurmctld /usr/sbin/slurmd /usr/sbin/slurmdbd /usr/bin/sbatch \
        /usr/bin/sacct /usr/sbin/munged /usr/sbin/mariadbd /usr/sbin/slurmrestd; do
        [ -x "$f" ] || return 0
    done
    ls /usr/lib/*/slurm-wlm/accounting_storage_mysql.so >/dev/null 2>&1 || return 0
    ls /usr/lib/*/slurm-wlm/openapi_v0_0_38.so >/dev/null 2>&1 || return 0
    return 1
}

if need_install; then
    command -v apt-get >/dev/null || die "apt-get not found: this script needs Debian 12"
    say "installing $PACKAGES (apt-get, --no-install-recommends)"
    # Installing must start nothing (every daemon is started below, by hand).
    own_policy=
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        own_policy=1
    fi
    mkdir -p "$LOG"
    apt_install() {
        host_apt install -y -q --no-install-recommends $PACKAGES >>"$LOG/apt.log" 2>&1
    }
    if ! apt_install; then
        say "apt-get install failed; running apt-get update and retrying"
        if ! host_apt update -q >>"$LOG/apt.log" 2>&1; then
            [ -n "$own_policy" ] && rm -f /usr/sbin/policy-rc.d
            tail_log "$LOG/apt.log"
            die "apt-get update failed (package repositories unreachable?); see $LOG/apt.log"
        fi
        if ! apt_install; then
            [ -n "$own_policy" ] && rm -f /usr/sbin/policy-rc.d
            tail_log "$LOG/apt.log"
            die "apt-get install $PACKAGES failed; see $LOG/apt.log"
        fi
    fi
    [ -n "$own_policy" ] && rm -f /usr/sbin/policy-rc.d
    need_install && die "packages installed but Slurm binaries or plugins are still missing"
    say "packages installed"
fi

mkdir -p "$RUN" "$LOG" "$STATE/ctld" "$CONF_DIR"
for n in $NODES; do mkdir -p "$STATE/spool/$n"; done

# 2. Configuration -----------------------------------------------------------------
# Daemons running with an older configuration are stopped here (all at once) and
# started again below: slurmctld and the slurmd for slurm.conf, slurmdbd for its own.
stale=
slurm_conf >"$STATE/slurm.conf.new"
if install_conf "$STATE/slurm.conf.new" "$CONF_DIR/slurm.conf" 644; then
    say "configuration written to $CONF_DIR/slurm.conf"
    stale="$RUN/slurmctld.pid $(echo "$RUN"/slurmd-*.pid)"
fi
slurmdbd_conf >"$STATE/slurmdbd.conf.new"
if install_conf "$STATE/slurmdbd.conf.new" "$CONF_DIR/slurmdbd.conf" 600; then
    say "configuration written to $CONF_DIR/slurmdbd.conf"
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

# 3. munge -------------------------------------------------------------------------
munge_works() { munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; }
if ! munge_works; then
    if [ ! -s /etc/munge/munge.key ]; then
        say "creating /etc/munge/munge.key"
        mkdir -p /etc/munge
        if command -v mungekey >/dev/null; then
            mungekey --create --keyfile=/etc/munge/munge.key
        else
            dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2>/dev/null
        fi
    fi
    chown munge:munge /etc/munge /etc/munge/munge.key
    chmod 700 /etc/munge
    chmod 400 /etc/munge/munge.key
    mkdir -p /run/munge /var/lib/munge /var/log/munge
    chown munge:munge /run/munge /var/lib/munge /var/log/munge
    chmod 755 /run/munge
    say "starting munged"
    # munged refuses to run as root; it daemonizes itself.
    if ! (close_fds && exec runuser -u munge -- /usr/sbin/munged </dev/null >>"$LOG/munged.out" 2>&1); then
        tail_log "$LOG/munged.out"
        tail_log /var/log/munge/munged.log
        die "munged did not start"
    fi
    touch "$RUN/started-munged"
    wait_for 10 munge munge_works || {
        tail_log /var/log/munge/munged.log
        die "munged started but munge -n | unmunge fails"
    }
fi

# 4. MariaDB -----------------------------------------------------------------------
MYSQL_ADMIN=
host_mariadb "$LOG" "$RUN"
accounting_db "$DB_NAME" "$DB_USER" "$DB_PASS"

# 5. slurmdbd ----------------------------------------------------------------------
dbd_answers() { timeout 10 sacctmgr -n -P list cluster format=cluster; }
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
if ! dbd_answers | grep -qx "$CLUSTER"; then
    say "registering cluster $CLUSTER, account $ACCOUNT and user root in the accounting database"
    sacctmgr -i add cluster "$CLUSTER" >>"$LOG/sacctmgr.log" 2>&1 || true
fi
if ! timeout 10 sacctmgr -n -P list account "$ACCOUNT" format=account 2>/dev/null | grep -qx "$ACCOUNT"; then
    sacctmgr -i add account "$ACCOUNT" Cluster="$CLUSTER" Description=jobtap Organization=jobtap \
        >>"$LOG/sacctmgr.log" 2>&1 || true
    sacctmgr -i add user root Account="$ACCOUNT" DefaultAccount="$ACCOUNT" \
        >>"$LOG/sacctmgr.log" 2>&1 || true
fi

# 6. slurmctld ---------------------------------------------------------------------
ctld_answers() { timeout 5 scontrol ping | grep -q UP; }
if ! alive "$RUN/slurmctld.pid" slurmctld; then
    say "starting slurmctld"
    spawn "$LOG/slurmctld.out" /usr/sbin/slurmctld
fi
wait_for "$TIMEOUT" slurmctld ctld_answers || {
    tail_log "$LOG/slurmctld.log"
    tail_log "$LOG/slurmctld.out" 5
    die "slurmctld did not start within ${TIMEOUT}s"
}

# 7. slurmd, one per node name -----------------------------------------------------
for n in $NODES; do
    if ! alive "$RUN/slurmd-$n.pid" slurmd; then
        say "starting slurmd -N $n"
        spawn "$LOG/slurmd-$n.out" /usr/sbin/slurmd -N "$n"
    fi
done

node_states() { timeout 5 sinfo -h -N -o '%N %T' 2>/dev/null | sort -u; }
# Wait for n1..n4 to be up.  Nodes an earlier run left drained or down (a test's
# drain, a crash) are resumed once they have registered.
resumed=
deadline=$(($(date +%s) + TIMEOUT))
while :; do
    states=$(node_states || true)
    good=$(echo "$states" | grep -cE ' (idle|mixed|allocated|completing)$' || true)
    [ "$good" -eq 4 ] && break
    if [ "$(date +%s)" -ge "$deadline" ]; then
        echo "$states" | sed 's/^/    | /' >&2
        for n in $NODES; do tail_log "$LOG/slurmd-$n.log" 5; done
        die "nodes n1..n4 did not become idle within ${TIMEOUT}s"
    fi
    for n in $(echo "$states" | awk '$2 ~ /^(drain|drained|draining|down|fail)$/ {print $1}'); do
        case " $resumed " in *" $n "*) continue ;; esac
        say "resuming $n (left $(echo "$states" | awk -v n="$n" '$1 == n {print $2}') by an earlier run)"
        scontrol update nodename="$n" state=resume >/dev/null 2>&1 || true
        resumed="$resumed $n"
    done
    sleep 0.3
done

say "ready: cluster $CLUSTER, nodes $(echo $NODES), partition debug, MinJobAge ${MIN_JOB_AGE}s; logs in $LOG"

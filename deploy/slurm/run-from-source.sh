#!/bin/bash
# Run a Slurm that deploy/slurm/build-from-source.sh built into /opt/slurm/VERSION as
# a small single-host cluster of its own, beside any other Slurm on the host.  A
# development tool for deploy/slurm/capture.sh, not part of the test suite.
#
#   sudo deploy/slurm/run-from-source.sh 24.05 start
#   eval "$(deploy/slurm/run-from-source.sh 24.05 env)"   # PATH and SLURM_CONF for clients
#   deploy/slurm/capture.sh tests/fixtures/slurm/24.05    # (with that environment)
#   sudo deploy/slurm/run-from-source.sh 24.05 stop       # cancels every job of it first
#
# The cluster: ClusterName=jobtap, nodes n1..n4 (4 CPUs, 1000 MB each, one
# `slurmd -N nX` each on 127.0.0.1, SlurmdParameters=config_overrides), partition
# `debug`, MinJobAge 10 s, proctrack/linuxproc, task/none, no cgroups, accounting
# through its own slurmdbd and its own MariaDB database (slurm_acct_db_YYMM on the
# host's MariaDB at 127.0.0.1:3306, started as deploy/slurm/start.sh does when
# nothing answers there), the host's munged (started when `munge -n | unmunge`
# fails).  Configuration in /opt/slurm/VERSION/etc (SLURM_CONF), state, logs and
# pid files in /var/lib/jobtap-slurm-VERSION.
#
# Ports: one block per release, below the ephemeral range and clear of the
# project's 22.05 (6817/6819, 17101-17104) and 17817/17819/17201-17204:
#   22.05 -> 180xx, 23.02 -> 182xx, 23.11 -> 183xx, 24.05 -> 184xx, 24.11 -> 185xx, 25.05 -> 186xx,
#   25.11 -> 187xx, 26.05 -> 188xx ...; in the block, slurmctld xx17, slurmdbd xx19,
#   nodes n1..n4 xx21-xx24.
#
# Hooks for capture.sh: PrologSlurmctld and EpilogSlurmctld run
# $STATE/hooks/capture-hook.sh, JobCompType=jobcomp/script runs
# $STATE/hooks/capture-jobcomp.sh.  When $STATE/hooks/capture-dir names a
# directory they write their environment (`env | sort`) to
# DIR/hook-env/<SLURM_SCRIPT_CONTEXT>-<jobid>.txt and DIR/jobcomp-env/<jobid>.txt
# (capture.sh writes and removes capture-dir itself); then they run jobtap's own
# hook, a no-op without /etc/jobtap/slurm-VERSION-hook.env (each cluster's own).
#
# Clients: $STATE/bin holds wrappers of the commands with this cluster's
# SLURM_CONF; first on PATH, they drive it (the live tests run on such a
# release with JOBTAP_SLURM_FROM_SOURCE=VERSION: sim/rig/slurm.py).
#
# Environment: JOBTAP_SLURM_MIN_JOB_AGE (default 10), JOBTAP_SLURM_TIMEOUT (seconds
# per daemon, default 60), JOBTAP_SLURM_NODES (default "n1 n2 n3 n4").
set -euo pipefail

VERSION=${1:?usage: run-from-source.sh VERSION start|stop|env|status}
ACTION=${2:?usage: run-from-source.sh VERSION start|stop|env|status}
[[ $VERSION =~ ^([0-9]{2})\.([0-9]{2})$ ]] || {
    echo "VERSION must look like 24.05" >&2
    exit 2
}
YY=$((10#${BASH_REMATCH[1]}))
MM=$((10#${BASH_REMATCH[2]}))
# JOBTAP_SLURM_PREFIX=/usr runs the distribution's packaged Slurm the same way
# (e.g. Debian 12's 22.05 beside deploy/slurm/start.sh's cluster, for its hooks).
PREFIX=${JOBTAP_SLURM_PREFIX:-/opt/slurm/$VERSION}
CONF_DIR=/opt/slurm/$VERSION/etc
STATE=/var/lib/jobtap-slurm-$VERSION
RUN=$STATE/run
LOG=$STATE/log
HOOKS=$STATE/hooks
MIN_JOB_AGE=${JOBTAP_SLURM_MIN_JOB_AGE:-10}
TIMEOUT=${JOBTAP_SLURM_TIMEOUT:-60}
NODES=${JOBTAP_SLURM_NODES:-n1 n2 n3 n4}
NNODES=$(echo $NODES | wc -w)
# Port block: two releases a year from 23.02 (index 0) on.
IDX=$(((YY - 23) * 2 + (MM >= 8 ? 1 : 0)))
[ "$IDX" -ge -2 ] && [ "$IDX" -le 7 ] || {
    echo "no port block for $VERSION" >&2
    exit 2
}
BASE=$((18200 + IDX * 100))
CTLD_PORT=$((BASE + 17))
DBD_PORT=$((BASE + 19))
NODE_PORT_BASE=$((BASE + 20))
CLUSTER=jobtap
ACCOUNT=lab
DB_NAME=slurm_acct_db_${VERSION/./}
DB_USER=jobtap_slurm_src
DB_PASS=jobtap-slurm-src
MARK="# Written by jobtap deploy/slurm/run-from-source.sh"
T0=$(date +%s)
CHECKOUT=$(cd "$(dirname "$0")/../.." && pwd)

say() { echo "slurm-$VERSION [$(($(date +%s) - T0))s]: $*"; }
die() {
    echo "slurm-$VERSION: ERROR: $*" >&2
    exit 1
}
# tail_log, close_fds, host_mariadb, accounting_db
# shellcheck source=deploy/slurm/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

export SLURM_CONF=$CONF_DIR/slurm.conf
export PATH=$PREFIX/bin:$PREFIX/sbin:$PATH

if [ "$ACTION" = env ]; then
    if [ "$PREFIX" = /usr ]; then echo "export SLURM_CONF=$SLURM_CONF"; else
        echo "export SLURM_CONF=$SLURM_CONF PATH=$PREFIX/bin:$PREFIX/sbin:\$PATH"
    fi
    exit 0
fi

alive() { # alive PIDFILE NAME
    local pid
    [ -s "$1" ] || return 1
    pid=$(cat "$1" 2>/dev/null) || return 1
    [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] && [ "$(cat "/proc/$pid/comm")" = "$2" ]
}
wait_for() { # wait_for SECONDS COMMAND...
    local deadline=$(($(date +%s) + $1))
    shift
    until "$@" >/dev/null 2>&1; do
        [ "$(date +%s)" -lt "$deadline" ] || return 1
        sleep 0.3
    done
}
spawn() { # spawn LOGFILE COMMAND...
    local logfile=$1
    shift
    (
        close_fds
        exec setsid "$@" </dev/null >>"$logfile" 2>&1
    ) &
}
stop_pidfile() { # stop_pidfile PIDFILE NAME
    local pid
    alive "$1" "$2" || return 0
    pid=$(cat "$1")
    kill "$pid" 2>/dev/null || true
    wait_for 20 sh -c "! kill -0 $pid" || kill -9 "$pid" 2>/dev/null || true
}

[ "$(id -u)" = 0 ] || die "must run as root"
[ -x "$PREFIX/sbin/slurmctld" ] || die "no build in $PREFIX: run deploy/slurm/build-from-source.sh $VERSION"

case "$ACTION" in
stop)
    if alive "$RUN/slurmctld.pid" slurmctld; then
        timeout 10 scancel --full --quiet --partition=debug 2>/dev/null || true
        ids=$(timeout 10 squeue -h -o %A 2>/dev/null | tr '\n' ' ' || true)
        [ -n "${ids// /}" ] && timeout 10 scancel $ids 2>/dev/null || true
        wait_for 30 sh -c "[ -z \"\$(squeue -h -t PD,R,CG,S -o %A 2>/dev/null)\" ]" || true
    fi
    for n in $NODES; do stop_pidfile "$RUN/slurmd-$n.pid" slurmd; done
    stop_pidfile "$RUN/slurmctld.pid" slurmctld
    stop_pidfile "$RUN/slurmdbd.pid" slurmdbd
    rm -f "$HOOKS/capture-dir"
    say "stopped"
    exit 0
    ;;
status)
    for f in slurmctld slurmdbd; do alive "$RUN/$f.pid" $f && echo "$f up" || echo "$f down"; done
    for n in $NODES; do alive "$RUN/slurmd-$n.pid" slurmd && echo "slurmd $n up" || echo "slurmd $n down"; done
    exit 0
    ;;
start) ;;
*) die "unknown action $ACTION (start|stop|env|status)" ;;
esac

HOST=$(hostname -s)
mkdir -p "$RUN" "$LOG" "$HOOKS" "$STATE/ctld" "$CONF_DIR"
for n in $NODES; do mkdir -p "$STATE/spool/$n"; done

# Hooks (see the header).  slurmctld waits for them: they exit 0 at once.
cat >"$HOOKS/capture-hook.sh" <<'EOF'
#!/bin/sh
# jobtap-capture-hook: PrologSlurmctld/EpilogSlurmctld for deploy/slurm/capture.sh
dir=$(cat "$(dirname "$0")/capture-dir" 2>/dev/null)
if [ -n "$dir" ] && [ -d "$dir" ]; then
    mkdir -p "$dir/hook-env"
    ctx=${SLURM_SCRIPT_CONTEXT:-$(basename "$0")}
    f="$dir/hook-env/$ctx-${SLURM_JOB_ID:-unknown}.txt"
    [ -e "$f" ] && f="$dir/hook-env/$ctx-${SLURM_JOB_ID:-unknown}-$$.txt"
    env | LC_ALL=C sort >"$f" 2>/dev/null
fi
# then jobtap's own hook (a no-op without /etc/jobtap/slurm-hook.env)
exec /bin/bash "$(dirname "$0")/jobtap-slurmctld-hook.sh"
EOF
cat >"$HOOKS/capture-jobcomp.sh" <<'EOF'
#!/bin/sh
# jobtap-capture-hook: JobCompLoc (jobcomp/script) for deploy/slurm/capture.sh
dir=$(cat "$(dirname "$0")/capture-dir" 2>/dev/null)
if [ -n "$dir" ] && [ -d "$dir" ]; then
    mkdir -p "$dir/jobcomp-env"
    f="$dir/jobcomp-env/${JOBID:-${SLURM_JOB_ID:-unknown}}.txt"
    [ -e "$f" ] && f="$dir/jobcomp-env/${JOBID:-${SLURM_JOB_ID:-unknown}}-$$.txt"
    env | LC_ALL=C sort >"$f" 2>/dev/null
fi
exec /bin/bash "$(dirname "$0")/jobtap-slurmctld-hook.sh"
EOF
# jobtap's hook, as deploy/slurm/start.sh installs it (its default command this
# checkout's .venv/bin/jobtap): follow mode on this release in the live tests.
sed -e "s|^DEFAULT_BIN=.*|DEFAULT_BIN=$CHECKOUT/.venv/bin/jobtap|" \
    -e "s|^ENV_FILE=.*|ENV_FILE=\${JOBTAP_HOOK_ENV:-/etc/jobtap/slurm-$VERSION-hook.env}|" \
    "$CHECKOUT/deploy/slurm/jobtap-slurmctld-hook.sh" >"$HOOKS/jobtap-slurmctld-hook.sh"
chmod 755 "$HOOKS/capture-hook.sh" "$HOOKS/capture-jobcomp.sh" "$HOOKS/jobtap-slurmctld-hook.sh"

# Client wrappers: $STATE/bin first on PATH drives this cluster (its SLURM_CONF).
mkdir -p "$STATE/bin"
for cmd in squeue sinfo sacct sacctmgr scontrol sbatch scancel sdiag srun salloc slurmrestd; do
    real=$PREFIX/bin/$cmd
    [ -x "$real" ] || real=$PREFIX/sbin/$cmd
    printf '#!/bin/sh\n# %s of the Slurm %s cluster of deploy/slurm/run-from-source.sh\nSLURM_CONF=%s exec %s "$@"\n' \
        "$cmd" "$VERSION" "$SLURM_CONF" "$real" >"$STATE/bin/$cmd"
    chmod 755 "$STATE/bin/$cmd"
done
# From 25.05, slurmrestd refuses to run as root, and refuses the setting that let
# it (SLURMRESTD_SECURITY=disable_user_check, which jobtap passes as root): its
# wrapper runs it as `daemon`, as a site runs the collector as a user of its own,
# reading from a pipe that user owns (rest_auth/local trusts the pipe's owner).
if [ "$YY" -gt 25 ] || { [ "$YY" -eq 25 ] && [ "$MM" -ge 5 ]; }; then
    cat >"$STATE/bin/slurmrestd" <<EOF
#!/bin/sh
# slurmrestd of the Slurm $VERSION cluster of deploy/slurm/run-from-source.sh, as daemon
exec env -u SLURMRESTD_SECURITY SLURM_CONF=$SLURM_CONF runuser -u daemon -- \\
    sh -c 'cat | exec "\$0" "\$@"' $PREFIX/sbin/slurmrestd "\$@"
EOF
fi

{
    echo "$MARK; edits are overwritten."
    cat <<EOF
ClusterName=$CLUSTER
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool/%n
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=2
ReturnToService=2
MailProg=/bin/true
MinJobAge=$MIN_JOB_AGE
KillWait=2
InactiveLimit=0
SlurmdTimeout=120
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
JobCompType=jobcomp/script
JobCompLoc=$HOOKS/capture-jobcomp.sh
PrologSlurmctld=$HOOKS/capture-hook.sh
EpilogSlurmctld=$HOOKS/capture-hook.sh
EOF
    port=$NODE_PORT_BASE
    for n in $NODES; do
        port=$((port + 1))
        echo "NodeName=$n NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$port CPUs=4 RealMemory=1000 State=UNKNOWN"
    done
    echo "PartitionName=debug Nodes=$(echo $NODES | tr ' ' ',') Default=YES MaxTime=INFINITE State=UP"
} >"$CONF_DIR/slurm.conf"
chmod 644 "$CONF_DIR/slurm.conf"
# Without cgroups: CgroupPlugin=disabled from 24.05 on (older releases do not know
# the value; with proctrack/linuxproc and task/none they need no cgroup.conf).
if [ "$IDX" -ge 2 ]; then
    printf '%s\nCgroupPlugin=disabled\n' "$MARK" >"$CONF_DIR/cgroup.conf"
else
    rm -f "$CONF_DIR/cgroup.conf"
fi
{
    echo "$MARK; edits are overwritten."
    cat <<EOF
AuthType=auth/munge
DbdHost=$HOST
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
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
} >"$CONF_DIR/slurmdbd.conf"
chmod 600 "$CONF_DIR/slurmdbd.conf"

# munge: the host's munged when it works, else start it (as start.sh does).
munge_works() { munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; }
if ! munge_works; then
    if [ ! -s /etc/munge/munge.key ]; then
        mkdir -p /etc/munge
        if command -v mungekey >/dev/null; then mungekey --create --keyfile=/etc/munge/munge.key; else
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
    (close_fds && exec runuser -u munge -- /usr/sbin/munged </dev/null >>"$LOG/munged.out" 2>&1) ||
        die "munged did not start"
    wait_for 10 munge_works || die "munged started but munge -n | unmunge fails"
fi

# MariaDB: the host's on 127.0.0.1:3306, started as start.sh does when absent.
host_mariadb "$LOG" "$RUN"
accounting_db "$DB_NAME" "$DB_USER" "$DB_PASS"

# slurmdbd, then the cluster, an account and root in it.
dbd_answers() { timeout 10 sacctmgr -n -P list cluster format=cluster; }
if ! alive "$RUN/slurmdbd.pid" slurmdbd; then
    say "starting slurmdbd (port $DBD_PORT, database $DB_NAME)"
    spawn "$LOG/slurmdbd.out" "$PREFIX/sbin/slurmdbd" # reads slurmdbd.conf beside $SLURM_CONF
fi
wait_for "$TIMEOUT" dbd_answers || {
    tail_log "$LOG/slurmdbd.log"
    tail_log "$LOG/slurmdbd.out" 5
    die "slurmdbd did not answer within ${TIMEOUT}s"
}
if ! dbd_answers | grep -qx "$CLUSTER"; then
    sacctmgr -i add cluster "$CLUSTER" >>"$LOG/sacctmgr.log" 2>&1 || true
fi
if ! timeout 10 sacctmgr -n -P list account "$ACCOUNT" format=account 2>/dev/null | grep -qx "$ACCOUNT"; then
    sacctmgr -i add account "$ACCOUNT" Cluster="$CLUSTER" Description=jobtap Organization=jobtap >>"$LOG/sacctmgr.log" 2>&1 || true
    sacctmgr -i add user root Account="$ACCOUNT" DefaultAccount="$ACCOUNT" >>"$LOG/sacctmgr.log" 2>&1 || true
fi

# slurmctld
ctld_answers() { timeout 5 scontrol ping | grep -q UP; }
if ! alive "$RUN/slurmctld.pid" slurmctld; then
    say "starting slurmctld (port $CTLD_PORT)"
    spawn "$LOG/slurmctld.out" "$PREFIX/sbin/slurmctld"
fi
wait_for "$TIMEOUT" ctld_answers || {
    tail_log "$LOG/slurmctld.log"
    tail_log "$LOG/slurmctld.out" 5
    die "slurmctld did not start within ${TIMEOUT}s"
}

# slurmd, one per node name
for n in $NODES; do
    if ! alive "$RUN/slurmd-$n.pid" slurmd; then
        say "starting slurmd -N $n"
        spawn "$LOG/slurmd-$n.out" "$PREFIX/sbin/slurmd" -N "$n"
    fi
done
node_states() { timeout 5 sinfo -h -N -o '%N %T' 2>/dev/null | sort -u; }
resumed=
deadline=$(($(date +%s) + TIMEOUT))
while :; do
    states=$(node_states || true)
    good=$(echo "$states" | grep -cE ' (idle|mixed|allocated|completing)$' || true)
    [ "$good" -eq "$NNODES" ] && break
    if [ "$(date +%s)" -ge "$deadline" ]; then
        echo "$states" | sed 's/^/    | /' >&2
        for n in $NODES; do tail_log "$LOG/slurmd-$n.log" 5; done
        die "nodes did not become idle within ${TIMEOUT}s"
    fi
    for n in $(echo "$states" | awk '$2 ~ /^(drain|drained|draining|down|fail)$/ {print $1}'); do
        case " $resumed " in *" $n "*) continue ;; esac
        scontrol update nodename="$n" state=resume >/dev/null 2>&1 || true
        resumed="$resumed $n"
    done
    sleep 0.3
done
say "ready: $(sinfo --version), nodes $(echo $NODES), partition debug, ports $CTLD_PORT/$DBD_PORT/$((NODE_PORT_BASE + 1))-$((NODE_PORT_BASE + NNODES)); use: eval \"\$($0 $VERSION env)\""

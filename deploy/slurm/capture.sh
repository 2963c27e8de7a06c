#!/bin/bash
# Run one scripted workload on a live Slurm and capture what its commands print,
# for jobtap's parser tests (tests/fixtures/slurm/<version>/).  Works with whatever
# Slurm the squeue/sbatch/sacct/scontrol/sinfo/sdiag/slurmrestd on PATH belong to
# (22.05 through 25.11), as root, on a cluster with partition `debug`, at least 2
# nodes of 4 CPUs, a small MinJobAge (10 s) and accounting through slurmdbd.
#
#   deploy/slurm/capture.sh OUTDIR                   # Debian's 22.05 (start.sh)
#   eval "$(deploy/slurm/run-from-source.sh 25.11 env)"
#   deploy/slurm/capture.sh tests/fixtures/slurm/25.11
#
# It only touches the jobs it submitted (names cap-*; it cancels those, never
# others), every wait has a time limit, and it leaves none of its jobs running
# (an EXIT trap cancels them).  About 3 minutes: the timed-out job needs a
# --time=1 limit (a minute) plus slurmctld's 30-second limit check.
#
# The workload (job-ids.txt says which id is which):
#   purged          `true`; ends at once; gone from squeue after MinJobAge
#   completed       exit 0              failed         exit 3
#   running         sleep, cancelled at the end
#   cancel-running  cancelled while running
#   cancel-pending  --begin=now+1hour, cancelled while pending
#   held            sbatch -H, cancelled at the end
#   held-released   sbatch -H, then scontrol release; runs and completes
#   timeout         --time=1, sleeps past it
#   array           --array=0-3, task 3 exits 4, the others sleep and exit 0
#   hetjob          two components (#SBATCH hetjob)
#   multinode       -N2
#   dependency      --dependency=afterany:<array>
#   pending-resources  asks every CPU of the partition, pending while others run
#
# What it writes to OUTDIR (see the README written beside the captures):
#   version.txt, job-ids.txt, summary.txt
#   squeue-1-active.json       jobs pending, running, held; the first ones ended
#   squeue-2-some-ended.json   cancellations done, short jobs ended
#   squeue-3-timeout.json      the timeout job ended TIMEOUT
#   squeue-4-after-min-job-age.json  `purged` gone from slurmctld
#   squeue-5-after-cancel-all.json   after its remaining jobs were cancelled
#   squeue-N-*-states-all.json  the same moments with --states=all (from 24.05 on,
#                               squeue --json leaves finished jobs out without it)
#   squeue-only-job-state-*.json / .err   squeue --only-job-state --json (23.11+)
#   sinfo-*.json, scontrol-show-partition*.txt/json, scontrol-show-node-oneliner.txt,
#   scontrol-show-nodes.json (23.02+: the node listing jobtap reads),
#   scontrol-show-job-<name>.json/.err (scontrol --json where supported)
#   sacct.json, sacct-jobid-exitcode.txt, sacct-parsable.txt
#   sdiag-*.txt (before and after 10 squeue --json + 10 --only-job-state reads)
#   rest/  slurmrestd in inetd mode: openapi-v3 (paths list), `slurmrestd -s list`,
#          GET /slurm/vX/job/N for each served vX (running, finished, purged jobs)
#   hook-env/<context>-<jobid>.txt    PrologSlurmctld/EpilogSlurmctld environment
#   jobcomp-env/<jobid>.txt           jobcomp/script environment
# The last two only when the cluster's hooks are capture hooks (run-from-source.sh
# installs them: they write where $(dirname hook)/capture-dir says).
#
# The host's short and full names are replaced by `host` in every file.
# Environment: CAPTURE_WORKDIR (jobs' working directory, default /tmp/jobtap-capture).
set -uo pipefail
# All in one block: bash reads it whole before running it, so editing this file
# while a capture runs cannot change the running capture.
{

OUT=${1:?usage: capture.sh OUTDIR}
mkdir -p "$OUT" || exit 1
OUT=$(cd "$OUT" && pwd)
WORK=${CAPTURE_WORKDIR:-/tmp/jobtap-capture}
mkdir -p "$WORK" "$OUT/rest"
cd "$WORK" || exit 1
T0=$(date +%s)
say() { echo "capture [$(($(date +%s) - T0))s]: $*" >&2; }
die() {
    echo "capture: ERROR: $*" >&2
    exit 1
}
[ "$(id -u)" = 0 ] || die "run as root"
for c in squeue sbatch scancel scontrol sinfo sacct sdiag python3; do
    command -v $c >/dev/null || die "$c not on PATH"
done

# Pretty-print JSON (when it is JSON) from stdin into FILE.
pretty() { # pretty FILE
    python3 -c '
import json, sys
raw = sys.stdin.read()
try:
    doc = json.loads(raw)
except ValueError:
    sys.stdout.write(raw)
else:
    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")
' >"$1"
}
# run_to BASE COMMAND...: stdout to BASE (pretty if JSON), stderr to BASE.err when
# the command failed or printed to stderr; returns the command's status.
run_to() {
    local base=$1 rc
    shift
    "$@" 2>"$base.err.tmp" | pretty "$base"
    rc=${PIPESTATUS[0]}
    if [ "$rc" -ne 0 ] || [ -s "$base.err.tmp" ]; then
        { echo "\$ $*"; echo "exit status $rc"; cat "$base.err.tmp"; } >"$base.err"
    fi
    rm -f "$base.err.tmp"
    [ -s "$base" ] || rm -f "$base"
    return "$rc"
}
wait_until() { # wait_until SECONDS WHAT COMMAND...
    local limit=$1 what=$2 deadline
    shift 2
    deadline=$(($(date +%s) + limit))
    until "$@" >/dev/null 2>&1; do
        if [ "$(date +%s)" -ge "$deadline" ]; then
            say "gave up waiting ${limit}s for: $what"
            return 1
        fi
        sleep 1
    done
}

# Jobs -----------------------------------------------------------------------------
declare -A ID
NAMES=()
MINE=() # every id to cancel at the end
submit() { # submit NAME SBATCH-ARGS...
    local name=$1 out id
    shift
    out=$(sbatch --parsable -J "cap-$name" -p debug -D "$WORK" -o "$WORK/%x-%j.out" "$@" 2>&1) || {
        say "sbatch for $name failed: $out"
        return 1
    }
    id=${out%%;*}
    ID[$name]=$id
    NAMES+=("$name")
    MINE+=("$id")
    say "submitted $name as $id"
}
state_of() { squeue -h -j "$1" -o %T 2>/dev/null | head -n 1; }
is_state() { # is_state ID STATE...
    local s
    s=$(state_of "$1")
    shift
    for want in "$@"; do [ "$s" = "$want" ] && return 0; done
    return 1
}
gone_or_done() { # the job left squeue or ended
    local s
    s=$(state_of "$1")
    case "$s" in "" | COMPLETED | FAILED | CANCELLED | TIMEOUT | OUT_OF_MEMORY | NODE_FAIL | BOOT_FAIL | DEADLINE | PREEMPTED) return 0 ;; esac
    return 1
}
in_squeue() { [ -n "$(squeue -h -j "$1" -o %i 2>/dev/null)" ] || squeue -h -o %i 2>/dev/null | grep -qx "$1"; }
not_in_squeue() { ! squeue -h -t all -o %A 2>/dev/null | grep -qx "$1"; }

cancel_mine() {
    [ ${#MINE[@]} -gt 0 ] || return 0
    scancel "${MINE[@]}" 2>/dev/null
    local deadline=$(($(date +%s) + 60)) id left
    while :; do
        left=
        for id in "${MINE[@]}"; do
            case "$(squeue -h -j "$id" -o %T 2>/dev/null | sort -u | tr '\n' ' ')" in
            *PENDING* | *RUNNING* | *COMPLETING* | *SUSPENDED* | *CONFIGURING*) left="$left $id" ;;
            esac
        done
        [ -z "$left" ] && return 0
        [ "$(date +%s)" -ge "$deadline" ] && {
            say "jobs still active after cancelling:$left"
            return 1
        }
        sleep 1
    done
}

# Hooks: the cluster's PrologSlurmctld / JobCompLoc, if they are capture hooks.
# (24.05 on print list settings as `PrologSlurmctld[0] = ...`.)
config_value() {
    scontrol show config 2>/dev/null | awk -v k="$1" '{n = $1; sub(/\[[0-9]+\]$/, "", n)} n == k {sub(/^[^=]*= */, ""); print; exit}'
}
HOOK=$(config_value PrologSlurmctld)
JOBCOMP_TYPE=$(config_value JobCompType)
JOBCOMP_LOC=$(config_value JobCompLoc)
POINTERS=()
for f in "$HOOK" "$JOBCOMP_LOC"; do
    [ -n "$f" ] && [ -f "$f" ] && grep -q jobtap-capture-hook "$f" || continue
    p=$(dirname "$f")/capture-dir
    echo "$OUT" >"$p"
    POINTERS+=("$p")
done
mkdir -p "$OUT/hook-env" "$OUT/jobcomp-env"

finish() {
    cancel_mine
    local p
    for p in "${POINTERS[@]}"; do rm -f "$p"; done
}
trap finish EXIT
trap 'exit 130' INT TERM

# 0. The cluster ---------------------------------------------------------------------
sinfo --version >"$OUT/version.txt" 2>&1
say "$(cat "$OUT/version.txt") (squeue $(command -v squeue))"
sdiag >"$OUT/sdiag-0-start.txt" 2>&1
run_to "$OUT/sinfo-idle.json" sinfo --json
run_to "$OUT/scontrol-show-partition-oneliner.txt" scontrol show partition -o
run_to "$OUT/scontrol-show-partition.json" scontrol show partition --json
run_to "$OUT/scontrol-show-node-oneliner.txt" scontrol show node -o
TOTAL_CPUS=$(sinfo -h -p debug -o %C | awk -F/ '{print $4}')
[ -n "$TOTAL_CPUS" ] && [ "$TOTAL_CPUS" -ge 8 ] || die "partition debug has ${TOTAL_CPUS:-no} CPUs (need 2 nodes of 4)"
NODES_UP=$(sinfo -h -p debug -o %D | head -n 1)

# 1. Submit ------------------------------------------------------------------------
submit purged --time=2 --wrap 'true'
submit completed --time=2 --wrap 'echo done; exit 0'
submit failed --time=2 --wrap 'echo failing >&2; exit 3'
submit running --time=10 --wrap 'sleep 600'
submit cancel-running --time=10 --wrap 'sleep 600'
submit cancel-pending --time=2 --begin=now+3600 --wrap 'true'
submit held -H --time=2 --wrap 'true'
submit held-released -H --time=2 --wrap 'sleep 3'
submit timeout --time=1 --wrap 'sleep 600'
cat >"$WORK/array.sh" <<'EOF'
#!/bin/bash
# task 3 fails, the others sleep a little and succeed
[ "$SLURM_ARRAY_TASK_ID" = 3 ] && exit 4
sleep 15
EOF
submit array --time=2 --array=0-3 "$WORK/array.sh"
cat >"$WORK/hetjob.sh" <<'EOF'
#!/bin/bash
#SBATCH -n 1 --time=2
#SBATCH hetjob
#SBATCH -n 2 --time=2
sleep 15
EOF
submit hetjob "$WORK/hetjob.sh"
submit multinode -N2 -n2 --time=2 --wrap 'sleep 15'
[ -n "${ID[array]:-}" ] && submit dependency --time=2 --dependency=afterany:"${ID[array]}" --wrap 'sleep 2'

wait_until 60 "running jobs to run" sh -c "
    for j in ${ID[running]} ${ID[cancel-running]} ${ID[timeout]} ${ID[multinode]}; do
        [ \"\$(squeue -h -j \$j -o %T | head -n 1)\" = RUNNING ] || exit 1
    done"
wait_until 30 "array and hetjob to run" sh -c "
    squeue -h -j ${ID[array]} -o %T | grep -q RUNNING &&
    squeue -h -j ${ID[hetjob]} -o %T | grep -q RUNNING"
# Every CPU of the partition: pending for resources while the others run.
submit pending-resources --time=1 --nice=100 -n "$TOTAL_CPUS" --wrap 'true'
wait_until 20 "completed and failed to end" sh -c "
    for j in ${ID[completed]} ${ID[failed]}; do
        case \"\$(squeue -h -j \$j -o %T)\" in PENDING|RUNNING|CONFIGURING|COMPLETING) exit 1;; esac
    done"
sleep 3 # let the scheduler give pending-resources its reason

{
    echo "# name job-id what (capture.sh; $(cat "$OUT/version.txt"))"
    for n in "${NAMES[@]}"; do
        case $n in
        purged) d="exit 0 at once; gone from squeue after MinJobAge, sacct only (squeue-4)" ;;
        completed) d="exit 0" ;;
        failed) d="exit 3" ;;
        running) d="sleep 600, running until cancelled at the end" ;;
        cancel-running) d="cancelled while running (after squeue-1)" ;;
        cancel-pending) d="--begin=now+1hour, cancelled while pending (after squeue-1)" ;;
        held) d="sbatch -H, held until cancelled at the end" ;;
        held-released) d="sbatch -H, released after squeue-1, sleep 3, exit 0" ;;
        timeout) d="--time=1, sleep 600: TIMEOUT (squeue-3)" ;;
        array) d="--array=0-3; task 3 exits 4, tasks 0-2 sleep 15 and exit 0" ;;
        hetjob) d="heterogeneous job, 2 components (-n1 + -n2), sleep 15" ;;
        multinode) d="-N2 -n2, sleep 15" ;;
        dependency) d="--dependency=afterany:${ID[array]:-?} (the array), sleep 2" ;;
        pending-resources) d="-n $TOTAL_CPUS (every CPU of debug) --nice=100, pending for resources; cancelled at the end" ;;
        *) d= ;;
        esac
        printf '%-18s %-8s %s\n' "$n" "${ID[$n]}" "$d"
    done
} >"$OUT/job-ids.txt"

# 2. Jobs pending, running, held; the first ones ended -----------------------------
say "snapshot 1: active"
run_to "$OUT/squeue-1-active.json" squeue --json
run_to "$OUT/squeue-1-active-states-all.json" squeue --json --states=all
run_to "$OUT/squeue-only-job-state-1-active.json" squeue --only-job-state --json
run_to "$OUT/sinfo-busy.json" sinfo --json
# the node listing jobtap reads after 22.05 (whose scontrol has no --json)
run_to "$OUT/scontrol-show-nodes.json" scontrol show nodes --json
squeue -t all -o '%i %j %T %r' >"$OUT/squeue-1-active.txt" 2>&1
for n in running pending-resources held failed; do
    run_to "$OUT/scontrol-show-job-$n.json" scontrol show job --json "${ID[$n]}"
done
scontrol show job -o "${ID[running]}" >"$OUT/scontrol-show-job-running-oneliner.txt" 2>&1

# slurmrestd (inetd mode: HTTP on stdin/stdout) ------------------------------------
REST=$(command -v slurmrestd || true)
REST_VERSIONS=
# As root, slurmrestd needs SLURMRESTD_SECURITY=disable_user_check (what jobtap's
# collector uses); 25.05 on refuse that (fatal_abort) in any build but a developer
# one (configure --enable-developer; NDEBUG is defined otherwise).  Then it runs as
# $REST_USER, an ordinary user.
REST_MODE=root
REST_USER=${CAPTURE_REST_USER:-daemon}
rest_run() {
    if [ "$REST_MODE" = root ]; then
        timeout 30 env SLURMRESTD_SECURITY=disable_user_check "$REST" "$@"
    else
        # rest_auth/local accepts a pipe on stdin only when the pipe belongs to
        # slurmrestd's own user: `cat |` makes one as that user.
        timeout 30 runuser -u "$REST_USER" -- sh -c 'cat | "$0" "$@"' "$REST" "$@"
    fi
}
rest_how() {
    if [ "$REST_MODE" = root ]; then echo "SLURMRESTD_SECURITY=disable_user_check slurmrestd"; else
        echo "runuser -u $REST_USER -- sh -c 'cat | slurmrestd \$@' slurmrestd"
    fi
}
rest_get() { # rest_get FILE-BASE PATH: raw answer in BASE.http, body in BASE.json
    local base=$1 path=$2
    printf 'GET %s HTTP/1.1\r\nHost: localhost\r\n\r\n' "$path" |
        rest_run -a rest_auth/local >"$base.http" 2>"$base.stderr"
    echo "\$ printf 'GET $path HTTP/1.1\\r\\nHost: localhost\\r\\n\\r\\n' | $(rest_how) -a rest_auth/local  # exit status $?" >"$base.cmd"
    python3 - "$base" <<'EOF'
import json, sys
base = sys.argv[1]
raw = open(base + ".http", "rb").read()
head, sep, body = raw.partition(b"\r\n\r\n")
rest = b""
for line in head.split(b"\r\n"):
    if line.lower().startswith(b"content-length:"):
        n = int(line.split(b":", 1)[1])
        body, rest = body[:n], body[n:]
with open(base + ".http-head.txt", "wb") as f:
    f.write(head + b"\n")
    if rest:
        f.write(b"--- after the body (%d bytes): %r\n" % (len(rest), rest[:300]))
try:
    doc = json.loads(body)
except ValueError:
    if body:
        open(base + ".body.txt", "wb").write(body)
else:
    with open(base + ".json", "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
EOF
    cat "$base.cmd" "$base.http-head.txt" >"$base.txt" 2>/dev/null
    [ -s "$base.stderr" ] && { echo "--- stderr:"; cat "$base.stderr"; } >>"$base.txt"
    rm -f "$base.http" "$base.cmd" "$base.http-head.txt" "$base.stderr"
}
rest_jobs() { # rest_jobs LABEL JOBNAME...
    local label=$1 v n
    shift
    for v in $REST_VERSIONS; do
        for n in "$@"; do
            rest_get "$OUT/rest/$label-slurm-$v-job-$n" "/slurm/$v/job/${ID[$n]}"
        done
    done
}
if [ -n "$REST" ]; then
    say "slurmrestd: listing its plugins and the OpenAPI document"
    rest_run -s list >"$OUT/rest/slurmrestd-s-list.txt" 2>&1
    if grep -q "disable_user_check should only be used" "$OUT/rest/slurmrestd-s-list.txt"; then
        { echo "\$ SLURMRESTD_SECURITY=disable_user_check slurmrestd -s list   # as root"; cat "$OUT/rest/slurmrestd-s-list.txt"; } \
            >"$OUT/rest/root-disable-user-check-refused.txt"
        REST_MODE=user
        say "slurmrestd refuses SLURMRESTD_SECURITY=disable_user_check: running it as $REST_USER"
        rest_run -s list >"$OUT/rest/slurmrestd-s-list.txt" 2>&1
    fi
    rest_run -d list >"$OUT/rest/slurmrestd-d-list.txt" 2>&1
    rest_get "$OUT/rest/openapi-v3" /openapi/v3
    if [ -f "$OUT/rest/openapi-v3.json" ]; then
        # The paths are what matters; the whole document is large.
        python3 - "$OUT/rest/openapi-v3.json" >"$OUT/rest/openapi-v3-paths.txt" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
print("# openapi:", doc.get("openapi"), "info.version:", doc.get("info", {}).get("version"))
for p in sorted(doc.get("paths", {})):
    print(" ".join(sorted(doc["paths"][p])).upper(), p)
EOF
        REST_VERSIONS=$(grep -E '(^| )GET .*/slurm/v[0-9.]+/job/\{job_id\}$' "$OUT/rest/openapi-v3-paths.txt" |
            sed -E 's#.*/slurm/(v[0-9.]+)/job/.*#\1#' | sort -uV | tr '\n' ' ')
        gzip -9n "$OUT/rest/openapi-v3.json"
    fi
    if [ -z "$REST_VERSIONS" ]; then
        # Fall back on squeue's own plugin version.
        REST_VERSIONS=$(grep -oE '"(openapi|data_parser)/v0\.0\.[0-9]+"' "$OUT/squeue-1-active.json" |
            head -n 1 | grep -oE 'v0\.0\.[0-9]+')
    fi
    say "slurmrestd serves: ${REST_VERSIONS:-nothing found}"
    rest_jobs 1-active running failed completed array
else
    echo "slurmrestd not on PATH" >"$OUT/rest/none.txt"
fi

# 3. Cancellations, a release; short jobs end --------------------------------------
scancel "${ID[cancel-running]}" "${ID[cancel-pending]}"
scontrol release "${ID[held-released]}"
wait_until 90 "array, hetjob, multinode, held-released, dependency to end" sh -c "
    for j in ${ID[array]} ${ID[hetjob]} ${ID[multinode]} ${ID[held-released]} ${ID[dependency]:-} ${ID[cancel-running]}; do
        case \"\$(squeue -h -j \$j -o %T | sort -u | tr '\n' ' ')\" in *PENDING*|*RUNNING*|*CONFIGURING*|*COMPLETING*) exit 1;; esac
    done"
say "snapshot 2: some ended"
run_to "$OUT/squeue-2-some-ended.json" squeue --json
run_to "$OUT/squeue-2-some-ended-states-all.json" squeue --json --states=all
squeue -t all -o '%i %j %T %r' >"$OUT/squeue-2-some-ended.txt" 2>&1
run_to "$OUT/squeue-only-job-state-2-some-ended.json" squeue --only-job-state --json
for n in cancel-running dependency multinode hetjob; do
    run_to "$OUT/scontrol-show-job-$n.json" scontrol show job --json "${ID[$n]}"
done
[ -n "$REST" ] && rest_jobs 2-some-ended dependency cancel-running hetjob

# sdiag around some reads (RPC counts and times: REQUEST_JOB_INFO, REQUEST_JOB_STATE).
sdiag >"$OUT/sdiag-1-before-reads.txt" 2>&1
for i in 1 2 3 4 5 6 7 8 9 10; do squeue --json >/dev/null 2>&1; done
for i in 1 2 3 4 5 6 7 8 9 10; do squeue --only-job-state --json >/dev/null 2>&1; done
sdiag >"$OUT/sdiag-2-after-10-squeue-json-and-10-only-job-state.txt" 2>&1

# 4. The timeout -------------------------------------------------------------------
wait_until 150 "the timeout job to time out" sh -c "
    case \"\$(squeue -h -j ${ID[timeout]} -o %T)\" in TIMEOUT|'') exit 0;; *) exit 1;; esac"
say "snapshot 3: timeout"
run_to "$OUT/squeue-3-timeout.json" squeue --json
run_to "$OUT/squeue-3-timeout-states-all.json" squeue --json --states=all
squeue -t all -o '%i %j %T %r' >"$OUT/squeue-3-timeout.txt" 2>&1
run_to "$OUT/scontrol-show-job-timeout.json" scontrol show job --json "${ID[timeout]}"
[ -n "$REST" ] && rest_jobs 3-timeout timeout

# 5. MinJobAge: `purged` leaves slurmctld -------------------------------------------
wait_until 180 "purged to leave squeue" not_in_squeue "${ID[purged]}"
wait_until 90 "timeout to leave squeue" not_in_squeue "${ID[timeout]}"
say "snapshot 4: after MinJobAge"
run_to "$OUT/squeue-4-after-min-job-age.json" squeue --json
run_to "$OUT/squeue-4-after-min-job-age-states-all.json" squeue --json --states=all
squeue -t all -o '%i %j %T %r' >"$OUT/squeue-4-after-min-job-age.txt" 2>&1
run_to "$OUT/scontrol-show-job-purged.json" scontrol show job --json "${ID[purged]}"
scontrol show job "${ID[purged]}" >"$OUT/scontrol-show-job-purged.txt" 2>&1
[ -n "$REST" ] && rest_jobs 4-after-min-job-age purged

# 6. Cancel the rest; accounting -----------------------------------------------------
cancel_mine
sleep 2
say "snapshot 5: after cancelling the rest"
run_to "$OUT/squeue-5-after-cancel-all.json" squeue --json
run_to "$OUT/squeue-5-after-cancel-all-states-all.json" squeue --json --states=all
run_to "$OUT/sinfo-after.json" sinfo --json
IDS=$(
    IFS=,
    echo "${MINE[*]}"
)
sacct_settled() {
    local lines
    lines=$(sacct -n -X -P -o JobID,State -j "$IDS" 2>/dev/null) || return 1
    # Every job known, none still pending or running in the database.
    for id in "${MINE[@]}"; do echo "$lines" | grep -qE "^$id([_+|]|$)" || return 1; done
    ! echo "$lines" | grep -qE '\|(PENDING|RUNNING|REQUEUED|COMPLETING)$'
}
wait_until 90 "sacct to know every job as ended" sacct_settled
say "sacct"
run_to "$OUT/sacct.json" sacct --json -j "$IDS"
sacct -n -P -o JobID,ExitCode -j "$IDS" >"$OUT/sacct-jobid-exitcode.txt" 2>&1
sacct -P -o JobID,JobIDRaw,JobName,State,ExitCode,DerivedExitCode,Reason,NodeList,AllocCPUS,Submit,Start,End \
    -j "$IDS" >"$OUT/sacct-parsable.txt" 2>&1
# The same jobs through slurmrestd's slurmdbd side (one finished job, each version).
if [ -n "$REST" ] && [ -f "$OUT/rest/openapi-v3-paths.txt" ]; then
    for v in $(grep -E '(^| )GET .*/slurmdb/v[0-9.]+/job/\{job_id\}$' "$OUT/rest/openapi-v3-paths.txt" |
        sed -E 's#.*/slurmdb/(v[0-9.]+)/job/.*#\1#' | sort -uV); do
        rest_get "$OUT/rest/6-accounting-slurmdb-$v-job-failed" "/slurmdb/$v/job/${ID[failed]}"
    done
fi

# Epilogs and jobcomp run after the job ends: give them a moment.
if [ ${#POINTERS[@]} -gt 0 ]; then
    wait_until 30 "epilog and jobcomp files" sh -c "
        [ \$(ls '$OUT/hook-env' | grep -c '^epilog') -ge ${#MINE[@]} ] &&
        [ \$(ls '$OUT/jobcomp-env' | wc -l) -ge ${#MINE[@]} ]"
    sleep 2
fi
sdiag >"$OUT/sdiag-3-end.txt" 2>&1
for p in "${POINTERS[@]}"; do rm -f "$p"; done
POINTERS=()
[ -n "$(ls -A "$OUT/hook-env")" ] || echo "PrologSlurmctld=${HOOK:-(none)}: not a capture hook, no environment captured" >"$OUT/hook-env/none.txt"
[ -n "$(ls -A "$OUT/jobcomp-env")" ] || echo "JobCompType=${JOBCOMP_TYPE:-?} JobCompLoc=${JOBCOMP_LOC:-?}: not a capture hook, no environment captured" >"$OUT/jobcomp-env/none.txt"

# 7. Summary, host names masked --------------------------------------------------
python3 - "$OUT" "$REST_VERSIONS" >"$OUT/summary.txt" <<'EOF'
import json, os, sys
out, rest = sys.argv[1], sys.argv[2]
def meta(path):
    try:
        doc = json.load(open(os.path.join(out, path)))
    except Exception as exc:
        return f"(unreadable: {exc.__class__.__name__})"
    m = doc.get("meta", {})
    return json.dumps(m.get("plugin") or m.get("plugins") or m, sort_keys=True)
print("version:", open(os.path.join(out, "version.txt")).read().strip())
for f in ("squeue-1-active.json", "sinfo-busy.json", "sacct.json",
          "squeue-only-job-state-1-active.json", "scontrol-show-job-running.json"):
    print(f"{f}: meta.plugin(s) = {meta(f) if os.path.exists(os.path.join(out, f)) else '(absent)'}")
print("slurmrestd job versions:", rest or "(none)")
err = os.path.join(out, "squeue-only-job-state-1-active.json.err")
print("squeue --only-job-state --json:", "error: " + open(err).read().strip().replace("\n", " | ") if os.path.exists(err) else "works")
EOF
# README.md: what was captured, from which Slurm, on which cluster.
{
    v=$(cat "$OUT/version.txt")
    echo "# Real Slurm output: $v"
    echo
    echo "Captured by \`deploy/slurm/capture.sh\` on $(date -u +%Y-%m-%d) (one scripted workload, all jobs"
    echo "submitted as root from \`$WORK\`). \`sinfo --version\`: \`$v\`."
    echo
    echo "## Plugins that wrote the JSON"
    echo
    sed 's/^/    /' "$OUT/summary.txt"
    echo
    echo "## Cluster"
    echo
    echo "Partition \`debug\`, nodes (\`sinfo -N -o '%N %c %m %T'\` at the start):"
    echo
    sinfo -N -h -o '%N %c %m' 2>/dev/null | sort -u | sed 's/^/    /'
    echo
    echo "Settings (\`scontrol show config\`):"
    echo
    for k in ClusterName SelectType SelectTypeParameters ProctrackType TaskPlugin MinJobAge KillWait \
        OverTimeLimit SchedulerType AccountingStorageType JobCompType JobCompLoc PrologSlurmctld EpilogSlurmctld; do
        printf '    %-22s %s\n' "$k" "$(config_value "$k")"
    done
    echo
    echo "## Jobs (job-ids.txt)"
    echo
    sed 's/^/    /' "$OUT/job-ids.txt"
    echo
    cat <<'EOT'
## Files

- `squeue-1-active.json`: `squeue --json` with jobs pending (held, begin time, dependency,
  resources), running (array, hetjob, multinode...), and the first ones ended (completed,
  failed, array task 3); `squeue-2-some-ended.json` after the cancellations and the short
  jobs ended; `squeue-3-timeout.json` once the timeout job is TIMEOUT;
  `squeue-4-after-min-job-age.json` once `purged` and `timeout` left slurmctld (MinJobAge);
  `squeue-5-after-cancel-all.json` after the rest was cancelled.
  `squeue-N-*-states-all.json`: `squeue --json --states=all` at the same moments (22.05
  and 23.11 print every job either way; 24.05 and later leave finished jobs out of plain
  `squeue --json`). `squeue-N-*.txt`: the same moments as `squeue -t all -o '%i %j %T %r'`.
- `squeue-only-job-state-*.json`: `squeue --only-job-state --json` (a `.err` file holds the
  error where the release has no such option).
- `sinfo-idle.json`, `sinfo-busy.json`, `sinfo-after.json`: `sinfo --json`.
- `scontrol-show-partition-oneliner.txt` (`scontrol show partition -o`),
  `scontrol-show-partition.json` (`scontrol show partition --json`),
  `scontrol-show-node-oneliner.txt`, `scontrol-show-job-<name>.json`
  (`scontrol show job --json ID`), `scontrol-show-job-running-oneliner.txt`,
  `scontrol-show-job-purged.txt` (the error for a purged job). A `.err` file beside a
  capture holds the command, its exit status and what it printed to stderr.
- `sacct.json`: `sacct --json -j <every id>`; `sacct-jobid-exitcode.txt`:
  `sacct -n -P -o JobID,ExitCode -j ...`; `sacct-parsable.txt`: more columns, with a header.
- `sdiag-0-start.txt`, `sdiag-1-before-reads.txt`,
  `sdiag-2-after-10-squeue-json-and-10-only-job-state.txt`, `sdiag-3-end.txt`: `sdiag`.
- `rest/`: slurmrestd in inetd mode (HTTP on stdin/stdout), one process per request:
  `printf 'GET PATH HTTP/1.1\r\nHost: localhost\r\n\r\n' | SLURMRESTD_SECURITY=disable_user_check slurmrestd -a rest_auth/local`
  as root, or, where that is refused (`root-disable-user-check-refused.txt`), as an
  ordinary user: `runuser -u daemon -- sh -c 'cat | slurmrestd -a rest_auth/local'` (the
  pipe on slurmrestd's stdin must belong to its own user; each `.txt` says which).
  `openapi-v3.json.gz` is `GET /openapi/v3`, `openapi-v3-paths.txt` its paths;
  `slurmrestd-s-list.txt`/`-d-list.txt`: `slurmrestd -s list` / `-d list`;
  `<moment>-slurm-<vX>-job-<name>.json`: `GET /slurm/vX/job/ID` body, `.txt` the request,
  the answer's status line and headers and slurmrestd's stderr;
  `6-accounting-slurmdb-<vX>-job-failed.*`: `GET /slurmdb/vX/job/ID` of the failed job.
- `hook-env/<SLURM_SCRIPT_CONTEXT>-<jobid>.txt`: `env | sort` in PrologSlurmctld and
  EpilogSlurmctld; `jobcomp-env/<jobid>.txt`: `env | sort` in jobcomp/script's JobCompLoc
  (absent, with a `none.txt`, when the cluster's hooks are not capture hooks).

The host's name is replaced by `host`; nothing else is edited.
EOT
} >"$OUT/README.md"
FQDN=$(hostname -f 2>/dev/null || true)
SHORT=$(hostname -s)
for h in $(printf '%s\n' $FQDN $SHORT $(hostname) | sort -u); do
    [ -n "$h" ] && [ "$h" != localhost ] || continue
    grep -rlF --exclude='*.gz' -- "$h" "$OUT" 2>/dev/null | while read -r f; do
        sed -i "s/\b$(printf '%s' "$h" | sed 's/[.[\*^$/]/\\&/g')\b/host/g" "$f"
    done
    for f in "$OUT"/rest/*.gz; do
        [ -f "$f" ] || continue
        zcat "$f" | sed "s/\b$(printf '%s' "$h" | sed 's/[.[\*^$/]/\\&/g')\b/host/g" | gzip -9n >"$f.tmp" && mv "$f.tmp" "$f"
    done
done
say "done: $OUT ($(ls "$OUT" | wc -l) entries)"
cat "$OUT/summary.txt" >&2
exit 0
}

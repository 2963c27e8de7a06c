#!/bin/bash
# jobtap follow mode on Slurm: PrologSlurmctld and EpilogSlurmctld point here.
#
#   PrologSlurmctld=/path/to/jobtap-slurmctld-hook.sh   # the job starts
#   EpilogSlurmctld=/path/to/jobtap-slurmctld-hook.sh   # the job ended
#
# slurmctld runs it (as SlurmUser, with a small environment: SLURM_JOB_ID,
# SLURM_ARRAY_JOB_ID, SLURM_ARRAY_TASK_ID, SLURM_SCRIPT_CONTEXT...) and waits for
# it: a slow or failing PrologSlurmctld holds or requeues the job, a slow
# EpilogSlurmctld keeps it COMPLETING.  So this script starts `jobtap poke` in
# the background, detached, and exits 0 at once, whatever happens.  A poke that
# cannot be delivered (Redis away, wrong password) is lost; the collector's next
# full stat catches the change.
#
# Settings: KEY=VALUE lines in /etc/jobtap/slurm-hook.env (JOBTAP_HOOK_ENV
# overrides the path; slurmctld itself does not pass it).  The file holds the
# `poker` user's password: owned by SlurmUser, mode 0600.  It is read, not
# sourced: only these keys count, nothing in it runs.
#
#   JOBTAP_SITE=hpc1                                  # required
#   JOBTAP_REDIS=redis://poker:PASSWORD@10.1.2.3:6379/0   # required
#   JOBTAP_BIN=/opt/jobtap/bin/jobtap                 # default: see DEFAULT_BIN
#   JOBTAP_HOOK_LOG=/var/log/jobtap/slurm-hook.log    # default: /dev/null
#   JOBTAP_POKE_TIMEOUT=2                             # seconds per Redis connection
#
# Without the file (or with JOBTAP_SITE or JOBTAP_REDIS missing) the script does
# nothing, so slurm.conf can name it before jobtap is set up.
#
# Job ids: jobtap names an array task ARRAY_TASK ("20_3"), while SLURM_JOB_ID of
# a task is its own job number (e.g. 25); the script pokes "20_3" when
# SLURM_ARRAY_JOB_ID and SLURM_ARRAY_TASK_ID are set.  The Redis URL goes to
# `jobtap poke` through the environment (JOBTAP_REDIS), not the command line,
# where every local user could read the password (ps).

DEFAULT_BIN=/usr/local/bin/jobtap # deploy/slurm/start.sh installs a copy naming its .venv
ENV_FILE=${JOBTAP_HOOK_ENV:-/etc/jobtap/slurm-hook.env}

[ -r "$ENV_FILE" ] || exit 0

site= url= bin= hook_log= poke_timeout=
while IFS= read -r line || [ -n "$line" ]; do
    line=${line%$'\r'}
    case $line in '' | '#'*) continue ;; esac
    key=${line%%=*}
    [ "$key" = "$line" ] && continue
    value=${line#*=}
    key=${key#export }
    key=${key//[[:space:]]/}
    case $value in
    \"*\") value=${value#\"} value=${value%\"} ;;
    \'*\') value=${value#\'} value=${value%\'} ;;
    esac
    case $key in
    JOBTAP_SITE) site=$value ;;
    JOBTAP_REDIS) url=$value ;;
    JOBTAP_BIN) bin=$value ;;
    JOBTAP_HOOK_LOG) hook_log=$value ;;
    JOBTAP_POKE_TIMEOUT) poke_timeout=$value ;;
    esac
done <"$ENV_FILE"

[ -n "$site" ] && [ -n "$url" ] || exit 0
bin=${bin:-$DEFAULT_BIN}
hook_log=${hook_log:-/dev/null}
if [ ! -w "$hook_log" ] && { [ -e "$hook_log" ] || [ ! -w "$(dirname -- "$hook_log")" ]; }; then
    hook_log=/dev/null # cannot write there: no log rather than no poke
fi
case $poke_timeout in '' | *[!0-9.]*) poke_timeout=2 ;; esac

# Run as JobCompLoc (JobCompType=jobcomp/script): slurmctld's jobcomp plugin runs
# the script once a job completed, the job's facts in its environment (JOBID,
# JOBSTATE, EXITCODE, START, END, NODES...), with no SLURM_SCRIPT_CONTEXT.  The
# poke then carries them as the job's completion record, so that the collector
# can ship its final without asking slurmctld (collector/backends/slurm/hook.py
# says which it accepts).  slurmctld runs these one at a time: this returns in
# milliseconds like the rest.
record=
if [ -z "${SLURM_SCRIPT_CONTEXT:-}" ] && [ -n "${JOBID:-}" ] && [ -n "${JOBSTATE:-}" ]; then
    if [ "${ARRAYJOBID:-0}" != 0 ] && [[ ${ARRAYTASKID:-} =~ ^[0-9]{1,9}$ ]]; then
        job_id=${ARRAYJOBID}_${ARRAYTASKID}
    else
        job_id=$JOBID
    fi
    record="{" sep=
    for key in JOBID ARRAYJOBID ARRAYTASKID HETJOBID HETJOBOFFSET JOBSTATE EXITCODE \
        DERIVED_EC SUBMIT START END NODES NODECNT PROCS PARTITION USERNAME \
        GROUPNAME ACCOUNT JOBNAME LIMIT STATEREASONPREV WORK_DIR; do # (not UID: bash sets its own)
        [ -n "${!key+x}" ] || continue
        value=${!key}
        value=${value//\\/\\\\}
        value=${value//\"/\\\"}
        value=${value//[$'\001'-$'\037']/ }
        record+="$sep\"$key\":\"$value\"" sep=,
    done
    record+="}"
elif [ -n "${SLURM_ARRAY_JOB_ID:-}" ] && [ -n "${SLURM_ARRAY_TASK_ID:-}" ]; then
    job_id=${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}
else
    job_id=${SLURM_JOB_ID:-}
fi
[[ $job_id =~ ^[0-9]+(_[0-9]+)?$ ]] || exit 0

# The poke itself, fast: a few lines of the Redis protocol over bash's /dev/tcp,
# about 3 ms of CPU where `jobtap poke` (Python) takes 60 ms: in a 300-job burst
# its 600 runs took the two cores of the test machine for 15 s, and every RPC of
# slurmctld slowed down with them.  Anything it does not cover (TLS, a Unix
# socket, an IPv6 literal, a cluster's redirection, any error or a site name
# jobtap would refuse) falls back to `jobtap poke`, which then also writes the
# complaint to the log.  Key, MAXLEN and fields: those of cli/poke.py.
# shellcheck disable=SC2016 # expanded by the inner bash
FAST_POKE='
export LC_ALL=C
url=$JOBTAP_REDIS site=$JOBTAP_SITE t=$JOBTAP_POKE_TIMEOUT
case $url in redis://*) ;; *) exit 1 ;; esac
[[ $site =~ ^[A-Za-z0-9._-]{1,64}$ ]] || exit 1
rest=${url#redis://} auth= user= pass= have_pass=
case $rest in *@*) auth=${rest%@*} rest=${rest##*@} ;; esac
where=${rest%%/*} db=0
case $rest in */*) db=${rest#*/} db=${db%%\?*} ;; esac
db=${db:-0}
case $where in "["* | "") exit 1 ;; esac
host=${where%%:*} port=6379
case $where in *:*) port=${where##*:} ;; esac
[[ $port =~ ^[0-9]+$ && $db =~ ^[0-9]+$ ]] || exit 1
case $auth in *:*) user=${auth%%:*} pass=${auth#*:} have_pass=1 ;; esac
printf -v user "%b" "${user//%/\\x}"
printf -v pass "%b" "${pass//%/\\x}"
crlf=$'"'"'\r\n'"'"'
resp() {
    local a out="*$#$crlf"
    for a in "$@"; do out+="\$${#a}$crlf$a$crlf"; done
    printf "%s" "$out" >&3
}
reply() {
    IFS= read -r -t "$t" line <&3 || exit 1
    case $line in "$1"*) ;; *) exit 1 ;; esac
}
exec 3<>"/dev/tcp/$host/$port" || exit 1
if [ -n "$have_pass" ]; then
    if [ -n "$user" ]; then resp AUTH "$user" "$pass"; else resp AUTH "$pass"; fi
    reply +
fi
[ "$db" = 0 ] || { resp SELECT "$db"; reply +; }
extra=()
[ -z "$JOBTAP_POKE_ENDED" ] || extra+=(ended 1)
[ -z "$JOBTAP_POKE_RECORD" ] || extra+=(record "$JOBTAP_POKE_RECORD")
resp XADD "jobtap:{$site}:pokes" MAXLEN "~" 10000 "*" ids "$JOBTAP_POKE_ID" source "$HOSTNAME" \
    "${extra[@]}"
reply "\$"
'

# Detached, in this order.  slurmscriptd reads the script's output until every
# copy of that pipe is closed (the job waits meanwhile: CONFIGURING for a
# prolog, COMPLETING for an epilog), then kills the script's process group
# (killpg SIGTERM, 10 ms, SIGKILL).  So the background poke first leaves that
# group (setsid: a session of its own), and only then lets go of the pipe
# (stdin, stdout and stderr redirected): a poke that closed its copy before
# setsid could be killed in between, and was, for 5% of the pokes of a 300-job
# burst.  A time limit in case Redis hangs.
# The epilog's poke says the job ended: the collector then looks again within
# 0.1 s at a job it still finds COMPLETING (0.5 s otherwise).
ended=
case ${SLURM_SCRIPT_CONTEXT:-} in epilog_slurmctld) ended=--ended ;; esac
[ -z "$record" ] || ended=--ended
# (`jobtap poke`, the fallback, sends no record: the collector then reads the job.)
JOBTAP_REDIS=$url JOBTAP_SITE=$site JOBTAP_POKE_ID=$job_id JOBTAP_POKE_TIMEOUT=$poke_timeout \
    JOBTAP_POKE_ENDED=$ended JOBTAP_POKE_RECORD=$record FAST_POKE=$FAST_POKE setsid /bin/bash -c '
    exec </dev/null >>"$1" 2>&1
    shift
    timeout -k 1 "$JOBTAP_POKE_TIMEOUT" /bin/bash -c "$FAST_POKE" 2>/dev/null && exit 0
    exec timeout -k 2 15 "$@"' jobtap-poke "$hook_log" \
    "$bin" poke --site "$site" --timeout "$poke_timeout" $ended "$job_id" &
exit 0

#!/bin/bash
# Install (or remove) jobtap's PBS hooks on a PBS Pro / OpenPBS server, as root.
# Idempotent: run it again after changing a setting; it converges (re-imports what
# changed, gives poker the new site, rebuilds a jobtap other users cannot run).
# See deploy/pbs/README.md.
set -euo pipefail

usage() {
    cat <<'EOF'
usage: install-hook.sh --site SITE --redis URL [options]
       install-hook.sh --uninstall [options]

  --site SITE          the jobtap site the collector serves (required to install)
  --redis URL          the Redis the hooks poke, e.g. redis://redis1:6379/0. Poker's
                       password is added from CONFIG_DIR/poker.password unless the URL
                       has a user and password already.
  --admin-redis URL    an admin of the Redis ACLs [$JOBTAP_ADMIN_REDIS, else the one in
                       CONFIG_DIR/admin.env that deploy/redis/setup.sh wrote]. With it,
                       every run syncs the service users for SITE (`jobtap acl sync`,
                       passwords in CONFIG_DIR), keeping the sites poker had.
  --mom                also install the MoM hook (execjob_epilogue): pokes as soon as a
                       job ends on its execution host; the execution hosts must reach
                       Redis. Without --mom an earlier MoM hook is removed.
  --prefix DIR         where jobtap is installed [/opt/jobtap]: a virtual environment,
                       made (or remade, if other users cannot run it) with --python
  --python PATH        the Python of that environment [/usr/bin/python3]: one every
                       user may run (not a pyenv under /root), 3.11 or later
  --source SPEC        what pip installs into DIR [the checkout this script is in]
  --service-user NAME  the user the systemd units run as [jobtap]; created if missing
  --config-dir DIR     the hook's settings and the service passwords [/etc/jobtap]
  --qmgr PATH          qmgr [qmgr on PATH, else /opt/pbs/bin/qmgr]
  --dry-run            change nothing: print each change instead (queries still run;
                       on a fresh DIR jobtap goes into a temporary environment for them)
  --uninstall          delete the hooks and their settings (jobtap and passwords stay)
EOF
}

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SITE="" REDIS="" ADMIN_REDIS="" MOM=0 PREFIX=/opt/jobtap SOURCE="$(cd "$HERE/../.." && pwd)"
BASE_PYTHON=/usr/bin/python3 SERVICE_USER=jobtap
CONFIG_DIR=/etc/jobtap QMGR="" DRY_RUN=0 UNINSTALL=0
SERVER_HOOK=jobtap_poke MOM_HOOK=jobtap_mom_poke
SERVER_EVENTS="runjob,modifyjob,jobobit" MOM_EVENTS="execjob_epilogue"

while [ $# -gt 0 ]; do
    case "$1" in
        --site) SITE=${2:?--site needs a value}; shift 2 ;;
        --redis) REDIS=${2:?--redis needs a URL}; shift 2 ;;
        --admin-redis) ADMIN_REDIS=${2:?--admin-redis needs a URL}; shift 2 ;;
        --mom) MOM=1; shift ;;
        --prefix) PREFIX=${2:?--prefix needs a folder}; shift 2 ;;
        --python) BASE_PYTHON=${2:?--python needs a path}; shift 2 ;;
        --source) SOURCE=${2:?--source needs a value}; shift 2 ;;
        --service-user) SERVICE_USER=${2:?--service-user needs a name}; shift 2 ;;
        --config-dir) CONFIG_DIR=${2:?--config-dir needs a folder}; shift 2 ;;
        --qmgr) QMGR=${2:?--qmgr needs a path}; shift 2 ;;
        --dry-run) DRY_RUN=1; shift ;;
        --uninstall) UNINSTALL=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "install-hook.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
    esac
done

die() { echo "install-hook.sh: $*" >&2; exit 1; }
say() { echo "$*"; }
warn() { echo "warning: $*" >&2; WARNINGS=$((WARNINGS + 1)); }
WARNINGS=0
# A change: run it, or with --dry-run print it (quoted as a shell would need it).
change() {
    if [ "$DRY_RUN" = 1 ]; then
        local arg line="would run:"
        for arg in "$@"; do
            if [[ "$arg" =~ ^[A-Za-z0-9_./:=,@%+-]+$ ]]; then
                line+=" $arg"
            else
                line+=" '${arg//\'/\'\\\'\'}'"
            fi
        done
        echo "$line"
    else
        "$@"
    fi
}
# What a change did (with --dry-run: what it would do).
did() {
    if [ "$DRY_RUN" = 1 ]; then echo "  (dry run: not done) $*"; else echo "$*"; fi
}

if [ -z "$QMGR" ]; then
    QMGR=$(command -v qmgr || true)
    [ -n "$QMGR" ] || QMGR=/opt/pbs/bin/qmgr
fi
[ -x "$QMGR" ] || die "qmgr not found (looked on PATH and in /opt/pbs/bin; --qmgr PATH)"
if [ "$DRY_RUN" = 0 ] && [ "$(id -u)" != 0 ]; then
    die "run me as root (qmgr hook commands and $CONFIG_DIR need it), or with --dry-run"
fi

HOOK_SRC="$HERE/jobtap_poke_hook.py"
HOOK_DIR="$PREFIX/share/jobtap/pbs"
HOOK_FILE="$HOOK_DIR/jobtap_poke_hook.py"
CONFIG="$CONFIG_DIR/pbs-hook.json"

hook_exists() { "$QMGR" -c "list hook $1" >/dev/null 2>&1; }
qmgr_c() { change "$QMGR" -c "$1"; }

remove_hook() {
    if hook_exists "$1"; then
        qmgr_c "delete hook $1"
        did "hook $1: deleted"
    else
        say "hook $1: not installed"
    fi
}

if [ "$UNINSTALL" = 1 ]; then
    remove_hook "$MOM_HOOK"
    remove_hook "$SERVER_HOOK"
    for f in "$CONFIG" "$HOOK_FILE"; do
        if [ -e "$f" ]; then change rm -f "$f"; did "removed $f"; fi
    done
    say "left in place: $PREFIX (jobtap), the passwords in $CONFIG_DIR, user $SERVICE_USER"
    exit 0
fi

[ -n "$SITE" ] || die "--site is required"
[ -n "$REDIS" ] || die "--redis is required"

# 1. jobtap itself, where the hook and the services run it: a virtual environment
#    made with a Python that every user may run, since the services run as
#    $SERVICE_USER.  A Python under /root (a pyenv: mode 0700) gives everyone else
#    "bad interpreter: Permission denied".
if getent passwd "$SERVICE_USER" >/dev/null; then CHECK_USER=$SERVICE_USER; else CHECK_USER=nobody; fi
# Runs "$@" as $CHECK_USER; its error output on failure.
as_unprivileged() {
    if [ "$(id -u)" != 0 ]; then "$@" >/dev/null 2>&1 && return 0; return 1; fi
    command -v runuser >/dev/null || { warn "no runuser: not checked that $CHECK_USER can run $1"; return 0; }
    local errors
    errors=$(mktemp)
    if UNPRIVILEGED_OUTPUT=$(cd / && runuser -u "$CHECK_USER" -- "$@" 2>"$errors"); then
        rm -f "$errors"
        return 0
    fi
    UNPRIVILEGED_ERROR=$(tr '\n' ' ' < "$errors" | sed 's/ *$//')
    rm -f "$errors"
    return 1
}
UNPRIVILEGED_ERROR="" UNPRIVILEGED_OUTPUT=""
usable_python() {  # the base Python: 3.11+, runnable by $CHECK_USER
    [ -x "$BASE_PYTHON" ] || die "no Python at $BASE_PYTHON: give --python PATH (3.11 or later)"
    "$BASE_PYTHON" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))' \
        2>/dev/null || die "$BASE_PYTHON is not Python 3.11 or later with venv and ensurepip" \
        "(Debian, Ubuntu: apt-get install python3-venv): give --python PATH"
    as_unprivileged "$BASE_PYTHON" -c '' \
        || die "$BASE_PYTHON cannot be run by $CHECK_USER (${UNPRIVILEGED_ERROR:-refused}):" \
               "jobtap's services and the users' tools must run it; give --python PATH" \
               "with a system Python (e.g. /usr/bin/python3)"
}
runs_for_everyone() { as_unprivileged "$PREFIX/bin/jobtap" --version; }
# pip could not install $SOURCE (its error is above): most often this host cannot
# reach the package index (a PBS server without Internet access).
pip_failed() {
    die "pip could not install $SOURCE into $1 (pip's error above). A host that cannot" \
        "reach the package index: make a wheelhouse where pip can, with this host's" \
        "Python, and run this with PIP_NO_INDEX=1 PIP_FIND_LINKS=DIR --source DIR/jobtap-*.whl" \
        "(deploy/pbs/README.md, \"Without the package index\")"
}
make_venv() {  # [--clear]
    usable_python
    change "$BASE_PYTHON" -m venv "$@" "$PREFIX"
    change "$PREFIX/bin/pip" install --quiet --disable-pip-version-check "$SOURCE" \
        || pip_failed "$PREFIX"
}
RUNS=""
if [ ! -x "$PREFIX/bin/jobtap" ]; then
    say "installing jobtap into $PREFIX from $SOURCE with $BASE_PYTHON"
    make_venv
elif runs_for_everyone; then
    RUNS=1
else
    [ -f "$PREFIX/pyvenv.cfg" ] || die "$PREFIX/bin/jobtap cannot be run by $CHECK_USER" \
        "($UNPRIVILEGED_ERROR) and $PREFIX is not a virtual environment: fix or remove it"
    say "$PREFIX/bin/jobtap cannot be run by $CHECK_USER ($UNPRIVILEGED_ERROR):" \
        "remaking $PREFIX with $BASE_PYTHON"
    make_venv --clear
fi
if [ "$DRY_RUN" = 0 ]; then
    [ -n "$RUNS" ] || runs_for_everyone || die "$PREFIX/bin/jobtap cannot be run by" \
        "$CHECK_USER ($UNPRIVILEGED_ERROR): every folder above $PREFIX must let other users" \
        "in, and --python must be a Python every user may run"
    say "$PREFIX/bin/jobtap: runs as $CHECK_USER (${UNPRIVILEGED_OUTPUT:-checked})"
fi
JOBTAP="$PREFIX/bin/jobtap"   # what the hook and the services run
RUN_JOBTAP=$JOBTAP            # what this script runs for its queries
if [ ! -x "$JOBTAP" ]; then   # only in a dry run on a fresh prefix
    TEMP_VENV=$(mktemp -d)
    trap 'rm -rf "$TEMP_VENV"' EXIT
    say "(dry run: installing jobtap into a temporary $TEMP_VENV for the queries below)"
    "$BASE_PYTHON" -m venv "$TEMP_VENV" || die "$BASE_PYTHON cannot make a virtual environment"
    "$TEMP_VENV/bin/pip" install --quiet --disable-pip-version-check "$SOURCE" \
        || pip_failed "a temporary environment"
    RUN_JOBTAP="$TEMP_VENV/bin/jobtap"
fi
# jobtap's own Python (bin/jobtap may be a link into a virtual environment)
PYTHON="$(dirname "$(readlink -f "$RUN_JOBTAP")")/python"
# The site's poke stream (jobtap checks the site name); whether --redis holds a
# password; the writer's URL without one (for the instructions at the end).
INFO=$("$PYTHON" -c 'import sys; from urllib.parse import urlsplit, urlunsplit
from jobtap.keys import SiteKeys, POKES_MAXLEN
site, url = sys.argv[1:]
u = urlsplit(url)
print(SiteKeys(site).pokes, POKES_MAXLEN, 1 if u.password else 0)
print(urlunsplit(u._replace(netloc="writer@" + u.netloc.rpartition("@")[2])))' "$SITE" "$REDIS") \
    || die "bad site name $SITE"
{ read -r STREAM MAXLEN REDIS_HAS_PASSWORD; read -r WRITER_URL; } <<< "$INFO"

# 2. The user the systemd units run as (deploy/systemd: User=jobtap).
if getent passwd "$SERVICE_USER" >/dev/null; then
    say "service user $SERVICE_USER: exists"
else
    NOLOGIN=$(command -v nologin || echo /usr/sbin/nologin)
    change useradd --system --user-group --home-dir /var/lib/jobtap --no-create-home \
        --shell "$NOLOGIN" --comment "jobtap services" "$SERVICE_USER"
    did "service user $SERVICE_USER: created (a system user without login)"
fi

# 3. The service users in Redis.  Every run with an admin syncs them for SITE, so
#    that a run with another --site gives poker the new site's poke stream (the
#    sites poker had are kept: several sites may share this Redis).
if [ ! -d "$CONFIG_DIR" ]; then change install -d -m 0700 "$CONFIG_DIR"; fi
if [ -z "$ADMIN_REDIS" ] && [ -n "${JOBTAP_ADMIN_REDIS:-}" ]; then ADMIN_REDIS=$JOBTAP_ADMIN_REDIS; fi
if [ -z "$ADMIN_REDIS" ] && [ -r "$CONFIG_DIR/admin.env" ]; then
    ADMIN_REDIS=$(sed -n 's/^JOBTAP_ADMIN_REDIS=//p' "$CONFIG_DIR/admin.env" | tail -n 1)
    ADMIN_REDIS=${ADMIN_REDIS#[\"\']} ADMIN_REDIS=${ADMIN_REDIS%[\"\']}
    [ -z "$ADMIN_REDIS" ] || say "the Redis admin: from $CONFIG_DIR/admin.env"
fi
# jobtap as the admin; the URL goes in the environment, not on command lines (ps).
as_admin() { JOBTAP_ADMIN_REDIS="$ADMIN_REDIS" "$@"; }
if [ -n "$ADMIN_REDIS" ]; then
    # Redis must be set up first (deploy/redis/setup.sh): users made on a Redis
    # without an ACL file are gone when it restarts, and then every poke is refused.
    SETUP=$(as_admin "$PYTHON" -c 'import os, redis
r = redis.Redis.from_url(os.environ["JOBTAP_ADMIN_REDIS"], socket_connect_timeout=5,
                         decode_responses=True)
if not (r.config_get("aclfile").get("aclfile") or ""):
    print("no-aclfile")
d = r.acl_getuser("default")
if d and "on" in d["flags"] and "nopass" in d["flags"]:
    print("default-open")
poker = r.acl_getuser("poker") or {}
for rule in poker.get("keys") or []:
    if rule.startswith("~jobtap:{") and rule.endswith("}:pokes"):
        print("poker-site", rule[len("~jobtap:{"):-len("}:pokes")])' 2>&1) \
        || die "cannot reach the Redis admin: ${SETUP##*$'\n'}"
    case "$SETUP" in *no-aclfile*)
        warn "this Redis has no ACL file: the service users made now are lost when it" \
             "restarts, and every poke is refused then. Set Redis up first" \
             "(deploy/redis/setup.sh; deploy/pbs/README.md, \"Before you start\")" ;;
    esac
    case "$SETUP" in *default-open*)
        warn "this Redis' default user is on without a password: anyone who reaches it" \
             "can do anything. Set Redis up first (deploy/redis/setup.sh turns it off)" ;;
    esac
    SITES=("--site" "$SITE")
    for s in $(printf '%s\n' "$SETUP" | sed -n 's/^poker-site //p'); do
        [ "$s" = "$SITE" ] || SITES+=("--site" "$s")
    done
    SYNC=("$RUN_JOBTAP" acl sync "${SITES[@]}" --secrets-dir "$CONFIG_DIR" --url "$REDIS")
    if [ "$DRY_RUN" = 1 ]; then
        say "would run: jobtap acl sync ${SITES[*]} --secrets-dir $CONFIG_DIR (as the Redis admin);"
        say "  the service users it would set (password hashes hidden):"
        as_admin "${SYNC[@]}" --dry-run 2>&1 | sed -E 's/#[0-9a-f]{64}/#…/g' \
            | grep -E '^user (writer|operator|poker) |^#|^warning|^skipped' | sed 's/^/    /' || true
    else
        say "jobtap acl sync ${SITES[*]}: the service users writer, operator and poker"
        as_admin "${SYNC[@]}" || die "jobtap acl sync failed (above)"
    fi
elif [ "$REDIS_HAS_PASSWORD" = 0 ] && [ ! -s "$CONFIG_DIR/poker.password" ]; then
    die "no $CONFIG_DIR/poker.password: give --admin-redis URL (an admin of the Redis" \
        "ACLs; deploy/redis/setup.sh wrote it to $CONFIG_DIR/admin.env) to create the" \
        "service users, or a --redis URL with poker's password"
fi

# 4. Poker's URL: it may only append to the poke stream.
if [ "$REDIS_HAS_PASSWORD" = 1 ]; then
    POKE_URL=$REDIS
elif [ -s "$CONFIG_DIR/poker.password" ]; then
    POKE_URL=$("$PYTHON" -c 'import sys; from urllib.parse import quote, urlsplit, urlunsplit
u = urlsplit(sys.argv[1]); pw = open(sys.argv[2]).read().strip()
print(urlunsplit(u._replace(netloc="poker:%s@%s" % (quote(pw, safe=""), u.netloc))))' \
        "$REDIS" "$CONFIG_DIR/poker.password")
else  # only in a dry run: acl sync would make the password
    POKE_URL="redis://poker:PASSWORD-FROM-ACL-SYNC@${REDIS#*://}"
fi

# 5. The hook's settings (mode 0600: poker's password) and the hook's code.
NEW_CONFIG=$("$PYTHON" -c 'import json, sys
jobtap, site, redis, stream, maxlen = sys.argv[1:]
print(json.dumps({"jobtap": jobtap, "site": site, "redis": redis, "stream": stream,
                  "maxlen": int(maxlen), "timeout": 0.25}, indent=2))' \
    "$JOBTAP" "$SITE" "$POKE_URL" "$STREAM" "$MAXLEN")
if [ -f "$CONFIG" ] && [ "$(cat "$CONFIG")" = "$NEW_CONFIG" ]; then
    say "$CONFIG: unchanged"
elif [ "$DRY_RUN" = 1 ]; then
    say "would write $CONFIG (mode 0600; poker's password hidden here):"
    printf '%s\n' "$NEW_CONFIG" | sed -E 's#(://[^:/@]*:)[^@]*@#\1…@#' | sed 's/^/    /'
else
    (umask 077 && printf '%s\n' "$NEW_CONFIG" > "$CONFIG.new" && mv -f "$CONFIG.new" "$CONFIG")
    say "$CONFIG: written (mode 0600)"
fi
if ! cmp -s "$HOOK_SRC" "$HOOK_FILE"; then
    change install -d -m 0755 "$HOOK_DIR"
    change install -m 0644 "$HOOK_SRC" "$HOOK_FILE"
    did "$HOOK_FILE: installed"
fi

# 6. The hooks.  Both imports are done every time: PBS keeps its own copies, and a
#    changed file does nothing until it is imported again.
install_hook() {  # name events
    if hook_exists "$1"; then
        say "hook $1: exists, updating"
    else
        qmgr_c "create hook $1"
        did "hook $1: created"
    fi
    qmgr_c "set hook $1 event = '$2'"
    qmgr_c "set hook $1 fail_action = none"
    qmgr_c "set hook $1 alarm = 5"
    qmgr_c "set hook $1 enabled = true"
    qmgr_c "import hook $1 application/x-python default $HOOK_FILE"
    qmgr_c "import hook $1 application/x-config default $CONFIG"
}
install_hook "$SERVER_HOOK" "$SERVER_EVENTS"
if [ "$MOM" = 1 ]; then
    install_hook "$MOM_HOOK" "$MOM_EVENTS"
elif hook_exists "$MOM_HOOK"; then
    remove_hook "$MOM_HOOK"
fi

# 7. Does Redis take poker's pokes for this site?  The hook swallows a refusal (it
#    must never hold PBS up), so it is checked here: an XADD with the id 0-0 passes
#    the ACL check, or not, and then fails without writing anything.
if [ "$DRY_RUN" = 0 ]; then
    CHECK=$(JOBTAP_POKE_URL="$POKE_URL" "$PYTHON" -c 'import os, sys, redis
r = redis.Redis.from_url(os.environ["JOBTAP_POKE_URL"], socket_connect_timeout=5)
try:
    r.xadd(sys.argv[1], {"check": "1"}, id="0-0")
except redis.exceptions.NoPermissionError as exc:
    print("refused: %s" % exc); sys.exit(1)
except redis.exceptions.ResponseError as exc:
    if "0-0" not in str(exc):
        print("refused: %s" % exc); sys.exit(1)
except redis.RedisError as exc:
    print("unreachable: %s" % exc); sys.exit(2)' "$STREAM" 2>&1) && status=0 || status=$?
    case "$status" in
        0) say "pokes: poker may append to $STREAM" ;;
        2) warn "could not check poker's pokes ($CHECK): this host must reach Redis" ;;
        *) die "Redis refuses poker's pokes to $STREAM (${CHECK#refused: }): every poke of" \
               "the hook would be lost. Run this again with --admin-redis URL (or" \
               "$CONFIG_DIR/admin.env) so that acl sync gives poker site $SITE" ;;
    esac
fi

# 8. The collector runs qstat as $SERVICE_USER: it must see every user's job.
QOJ=$("$QMGR" -c "list server query_other_jobs" 2>/dev/null \
      | sed -n 's/^[[:space:]]*query_other_jobs[[:space:]]*=[[:space:]]*//p' || true)
case "$QOJ" in
    [Tt]rue) say "query_other_jobs: True (user $SERVICE_USER's qstat sees every job)" ;;
    *) warn "this PBS server's query_other_jobs is ${QOJ:-not set}: user $SERVICE_USER's" \
            "qstat may see only its own jobs, and the collector then none of the users'." \
            "Set it (qmgr -c \"set server query_other_jobs = true\") or make" \
            "$SERVICE_USER a PBS operator (qmgr -c \"set server operators += $SERVICE_USER@*\")" ;;
esac

PBS_BIN=$(dirname "$QMGR")
cat <<EOF

Done. Follow mode also needs, for site $SITE (deploy/pbs/README.md, "Then run"):
  * the systemd units (deploy/systemd/) in /etc/systemd/system, and in
    $CONFIG_DIR/jobtap.env (no password: the units read it from
    $CONFIG_DIR/writer.password, systemd's LoadCredential):
      JOBTAP_SITE=$SITE
      JOBTAP_BACKEND=pbs
      JOBTAP_COLLECTOR_ARGS=--follow
      JOBTAP_REDIS=$WRITER_URL   (the writer's name, no password)
      PATH=$PBS_BIN:/usr/sbin:/usr/bin:/sbin:/bin   (qstat is in $PBS_BIN)
    then: systemctl daemon-reload; systemctl enable --now jobtap-collector jobtap-worker@1
  * or by hand, with the password from the file (never in a URL: ps shows it):
      PATH=$PBS_BIN:\$PATH $JOBTAP collector --backend pbs --follow --site $SITE \\
          --redis $WRITER_URL --password-file $CONFIG_DIR/writer.password
  * at least one worker:  $JOBTAP worker --site $SITE --redis $WRITER_URL --password-file ...
  * then check it:        $JOBTAP doctor --site $SITE --redis $WRITER_URL --password-file ...
EOF
if [ "$WARNINGS" -gt 0 ]; then echo "($WARNINGS warnings above)"; fi

#!/bin/bash
# Install (or remove) jobtap's PBS hooks on a PBS Pro / OpenPBS server, as root.
# Idempotent: run it again after changing a setting; it re-imports what changed.
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
  --admin-redis URL    if CONFIG_DIR/poker.password does not exist yet: create the service
                       users with `jobtap acl sync` as this admin (passwords in CONFIG_DIR)
  --mom                also install the MoM hook (execjob_epilogue): pokes as soon as a
                       job ends on its execution host; the execution hosts must reach
                       Redis. Without --mom an earlier MoM hook is removed.
  --prefix DIR         where jobtap is installed [/opt/jobtap]; if DIR/bin/jobtap is
                       missing, a virtual environment is made there and --source installed
  --source SPEC        what pip installs into DIR [the checkout this script is in]
  --config-dir DIR     the hook's settings and the service passwords [/etc/jobtap]
  --qmgr PATH          qmgr [qmgr on PATH, else /opt/pbs/bin/qmgr]
  --dry-run            change nothing: print each change instead (queries still run)
  --uninstall          delete the hooks and their settings (jobtap and passwords stay)
EOF
}

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SITE="" REDIS="" ADMIN_REDIS="" MOM=0 PREFIX=/opt/jobtap SOURCE="$(cd "$HERE/../.." && pwd)"
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
        --source) SOURCE=${2:?--source needs a value}; shift 2 ;;
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
# A change: run it, or with --dry-run print it.
change() {
    if [ "$DRY_RUN" = 1 ]; then
        echo "would run: $*"
    else
        "$@"
    fi
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
        say "hook $1: deleted"
    else
        say "hook $1: not installed"
    fi
}

if [ "$UNINSTALL" = 1 ]; then
    remove_hook "$MOM_HOOK"
    remove_hook "$SERVER_HOOK"
    for f in "$CONFIG" "$HOOK_FILE"; do
        if [ -e "$f" ]; then change rm -f "$f"; say "removed $f"; fi
    done
    say "left in place: $PREFIX (jobtap) and the passwords in $CONFIG_DIR"
    exit 0
fi

[ -n "$SITE" ] || die "--site is required"
[ -n "$REDIS" ] || die "--redis is required"

# 1. jobtap itself, where the hook runs it.
if [ ! -x "$PREFIX/bin/jobtap" ]; then
    say "installing jobtap into $PREFIX from $SOURCE"
    change python3 -m venv "$PREFIX"
    change "$PREFIX/bin/pip" install --quiet "$SOURCE"
fi
JOBTAP="$PREFIX/bin/jobtap"
if [ ! -x "$JOBTAP" ]; then  # only in a dry run
    say "(dry run: the next steps need jobtap in $PREFIX)"
    exit 0
fi
# jobtap's own Python (bin/jobtap may be a link into a virtual environment)
PYTHON="$(dirname "$(readlink -f "$JOBTAP")")/python"
# The site's poke stream (jobtap checks the site name).
STREAM=$("$PYTHON" -c 'import sys; from jobtap.keys import SiteKeys, POKES_MAXLEN
print(SiteKeys(sys.argv[1]).pokes, POKES_MAXLEN)' "$SITE") || die "bad site name $SITE"
MAXLEN=${STREAM##* } STREAM=${STREAM% *}

# 2. Poker's URL: it may only append to the poke stream.
if [ ! -d "$CONFIG_DIR" ]; then change install -d -m 0700 "$CONFIG_DIR"; fi
url_has_user() { "$PYTHON" -c 'import sys; from urllib.parse import urlsplit
sys.exit(0 if urlsplit(sys.argv[1]).password else 1)' "$1"; }
if url_has_user "$REDIS"; then
    POKE_URL=$REDIS
else
    if [ ! -s "$CONFIG_DIR/poker.password" ]; then
        [ -n "$ADMIN_REDIS" ] || die "no $CONFIG_DIR/poker.password: give --admin-redis URL" \
            "(an admin of the Redis ACLs) to create the service users, or a --redis URL" \
            "with poker's password"
        say "creating the service users (writer, operator, poker) with jobtap acl sync"
        change "$JOBTAP" acl sync --site "$SITE" --redis "$ADMIN_REDIS" \
            --secrets-dir "$CONFIG_DIR" --url "$REDIS"
    fi
    if [ -s "$CONFIG_DIR/poker.password" ]; then
        POKE_URL=$("$PYTHON" -c 'import sys; from urllib.parse import quote, urlsplit, urlunsplit
u = urlsplit(sys.argv[1]); pw = open(sys.argv[2]).read().strip()
print(urlunsplit(u._replace(netloc="poker:%s@%s" % (quote(pw, safe=""), u.netloc))))' \
            "$REDIS" "$CONFIG_DIR/poker.password")
    else
        POKE_URL="redis://poker:PASSWORD-FROM-ACL-SYNC@${REDIS#*://}"
    fi
fi

# 3. The hook's settings (mode 0600: poker's password) and the hook's code.
NEW_CONFIG=$("$PYTHON" -c 'import json, sys
jobtap, site, redis, stream, maxlen = sys.argv[1:]
print(json.dumps({"jobtap": jobtap, "site": site, "redis": redis, "stream": stream,
                  "maxlen": int(maxlen), "timeout": 0.25}, indent=2))' \
    "$JOBTAP" "$SITE" "$POKE_URL" "$STREAM" "$MAXLEN")
if [ -f "$CONFIG" ] && [ "$(cat "$CONFIG")" = "$NEW_CONFIG" ]; then
    say "$CONFIG: unchanged"
elif [ "$DRY_RUN" = 1 ]; then
    say "would write $CONFIG (mode 0600): site $SITE, stream $STREAM, ${POKE_URL%%:*}://poker@…"
else
    (umask 077 && printf '%s\n' "$NEW_CONFIG" > "$CONFIG.new" && mv -f "$CONFIG.new" "$CONFIG")
    say "$CONFIG: written (mode 0600)"
fi
if ! cmp -s "$HOOK_SRC" "$HOOK_FILE"; then
    change install -d -m 0755 "$HOOK_DIR"
    change install -m 0644 "$HOOK_SRC" "$HOOK_FILE"
    say "$HOOK_FILE: installed"
fi

# 4. The hooks.  Both imports are done every time: PBS keeps its own copies, and a
#    changed file does nothing until it is imported again.
install_hook() {  # name events
    if hook_exists "$1"; then
        say "hook $1: exists, updating"
    else
        qmgr_c "create hook $1"
        say "hook $1: created"
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

PBS_BIN=$(dirname "$QMGR")
cat <<EOF

Done. Follow mode also needs, for site $SITE:
  * a collector that can run qstat (it is in $PBS_BIN, not on root's default PATH):
      PATH=$PBS_BIN:\$PATH $JOBTAP collector --backend pbs --follow --site $SITE --redis WRITER-URL
    (the writer's password is in $CONFIG_DIR/writer.password if acl sync made it;
    for systemd: deploy/systemd/jobtap-collector.service with JOBTAP_SITE=$SITE,
    JOBTAP_BACKEND=pbs and PATH=$PBS_BIN:/usr/sbin:/usr/bin:/sbin:/bin in its environment file);
  * at least one worker:  $JOBTAP worker --site $SITE --redis WRITER-URL
  * then check it:        $JOBTAP doctor --site $SITE --redis WRITER-URL
EOF

#!/bin/sh
# Set up a development/test checkout on Debian 12 (run by `make test` and `make demo`):
# the system packages jobtap needs (a python3 that can make venvs, redis-server),
# then a virtualenv in .venv with jobtap and its test tools.
set -eu
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

need=""
"$PYTHON" -c 'import ensurepip, venv' 2>/dev/null || need="$need python3-venv"
command -v redis-server >/dev/null 2>&1 || need="$need redis-server"
if [ -n "$need" ]; then
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        echo "jobtap setup: please install:$need (Debian: apt-get install$need)" >&2
        exit 1
    fi
    echo "jobtap setup: installing$need" >&2
    # Install without starting services: the tests start their own redis-server.
    policy=/usr/sbin/policy-rc.d
    made_policy=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy" && made_policy=1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $need >/dev/null
    [ "$made_policy" = 1 ] && rm -f "$policy"
fi

if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test]'

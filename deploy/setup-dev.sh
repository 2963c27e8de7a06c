#!/bin/sh
# Set up a development/test checkout on Debian 12 (run by `make test` and `make demo`):
# the system packages jobtap needs (a python3 that can make venvs, redis-server;
# for the tests also prometheus with promtool, and tmux to drive `jobtap top` in a
# real terminal), then a virtualenv in .venv with jobtap, its integrations and its
# test tools.
set -eu
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

apt_install() {
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        echo "jobtap setup: please install: $* (Debian: apt-get install $*)" >&2
        exit 1
    fi
    echo "jobtap setup: installing $*" >&2
    # Install without starting services: the tests start their own redis-server.
    policy=/usr/sbin/policy-rc.d
    made_policy=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy" && made_policy=1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2068
    apt-get install -y -qq --no-install-recommends $@ >/dev/null
    if [ "$made_policy" = 1 ]; then rm -f "$policy"; fi
}

missing=""
command -v redis-server >/dev/null 2>&1 || missing="$missing redis-server"
# redis-cli joins the local Redis Cluster of tests/cluster (redis-server depends on it)
command -v redis-cli >/dev/null 2>&1 || missing="$missing redis-tools"
# redis-sentinel watches the queue Redis of tests/sentinel (installed, never started here)
command -v redis-sentinel >/dev/null 2>&1 || missing="$missing redis-sentinel"
command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 \
    || missing="$missing prometheus"
command -v tmux >/dev/null 2>&1 || missing="$missing tmux"
# shellcheck disable=SC2086
[ -z "$missing" ] || apt_install $missing

if [ ! -x .venv/bin/python ]; then
    # Debian's python3 makes venvs only with python3-venv (ensurepip) installed.
    if ! "$PYTHON" -m venv .venv >/dev/null 2>&1; then
        rm -rf .venv
        apt_install python3-venv
        "$PYTHON" -m venv .venv
    fi
fi
.venv/bin/python -m pip install -q --upgrade pip
# jobtap with every integration, and the test tools (pyproject.toml's dependency
# group `test`, which pip 25.1 and later install; the upgrade above brings one)
.venv/bin/python -m pip install -q -e '.[psij,parsl,snakemake]' --group test

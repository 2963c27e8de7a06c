#!/bin/bash
# Build one Slurm release from SchedMD's repository into /opt/slurm/VERSION, for
# capturing what each release prints (deploy/slurm/capture.sh) on one host.  A
# development tool, not part of the test suite.
#
#   sudo deploy/slurm/build-from-source.sh 24.05        # newest patch tag of 24.05
#   sudo deploy/slurm/build-from-source.sh 25.11 slurm-25-11-7-1   # an exact tag
#   sudo deploy/slurm/run-from-source.sh 24.05 start    # then run it (see there)
#
# The source comes from the bare mirror $SLURM_MIRROR (default
# /work/.mirror/SchedMD+slurm/repo; tags slurm-YY-MM-P-1), is unpacked with
# `git archive` into $SLURM_BUILD_DIR/VERSION (default /var/tmp/jobtap-slurm-build;
# never inside the repository) and built there.  Installs the -dev packages it
# needs with apt-get (munge, json-c, http-parser, libyaml, libjwt, MariaDB's
# client library for slurmdbd's accounting_storage/mysql).  Configured with
# --enable-multiple-slurmd (several `slurmd -N NAME` on one host) and
# --sysconfdir=/opt/slurm/VERSION/etc (run-from-source.sh sets SLURM_CONF anyway).
#
# Idempotent: a VERSION whose /opt/slurm/VERSION/.built-from names the same tag is
# not rebuilt (JOBTAP_SLURM_REBUILD=1 forces it).  Runs make -j$JOBS (default 2).
# Times seen on 2 shared cores: see tests/fixtures/slurm/<version>/README.md.
set -euo pipefail

VERSION=${1:?usage: build-from-source.sh VERSION [TAG]   (VERSION like 24.05)}
MIRROR=${SLURM_MIRROR:-/work/.mirror/SchedMD+slurm/repo}
BUILD_ROOT=${SLURM_BUILD_DIR:-/var/tmp/jobtap-slurm-build}
PREFIX=/opt/slurm/$VERSION
JOBS=${JOBS:-2}
T0=$(date +%s)
say() { echo "build-slurm $VERSION [$(($(date +%s) - T0))s]: $*"; }
die() {
    echo "build-slurm $VERSION: ERROR: $*" >&2
    exit 1
}

[ "$(id -u)" = 0 ] || die "must run as root (apt-get, /opt)"
[[ $VERSION =~ ^[0-9]{2}\.[0-9]{2}$ ]] || die "VERSION must look like 24.05"
[ -d "$MIRROR" ] || die "no Slurm mirror at $MIRROR"

git_m() { git --git-dir="$MIRROR" "$@"; }
if [ $# -ge 2 ]; then
    TAG=$2
else
    # Newest patch tag of the release, release candidates (…-0rcN) left out.
    TAG=$(git_m tag -l "slurm-${VERSION/./-}-*-1" | sort -V | tail -n 1)
fi
[ -n "$TAG" ] && git_m rev-parse -q --verify "refs/tags/$TAG" >/dev/null ||
    die "no tag for $VERSION in $MIRROR (git tag -l 'slurm-${VERSION/./-}-*')"

if [ -z "${JOBTAP_SLURM_REBUILD:-}" ] && [ -x "$PREFIX/sbin/slurmctld" ] &&
    [ "$(cat "$PREFIX/.built-from" 2>/dev/null)" = "$TAG" ]; then
    say "already built from $TAG in $PREFIX"
    exit 0
fi

# 1. Build dependencies (apt-get update once, only when something is missing).
PKGS="build-essential pkg-config python3 bzip2 munge libmunge-dev libjson-c-dev
libhttp-parser-dev libyaml-dev libjwt-dev libmariadb-dev libmariadb-dev-compat
libssl-dev zlib1g-dev liblz4-dev"
missing=
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    say "installing$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends $missing >/dev/null
fi

# 2. Source.
SRC=$BUILD_ROOT/$VERSION
LOG=$BUILD_ROOT/$VERSION.log
mkdir -p "$BUILD_ROOT"
if [ "$(cat "$SRC/.jobtap-tag" 2>/dev/null)" != "$TAG" ]; then
    say "unpacking $TAG into $SRC"
    rm -rf "$SRC"
    mkdir -p "$SRC"
    git_m archive "$TAG" | tar -x -C "$SRC"
    echo "$TAG" >"$SRC/.jobtap-tag"
fi
cd "$SRC"

# 3. Configure.  Every optional library that the release looks for is named, so
# that a missing one fails here rather than building a Slurm without it.
flags=(--prefix="$PREFIX" --sysconfdir="$PREFIX/etc" --enable-multiple-slurmd
    --with-munge --with-json --with-yaml --with-jwt
    --without-hdf5 --without-pmix --without-ucx --without-rdmacm
    --without-nvml --without-rsmi --without-hwloc --without-lua --without-ofed)
grep -q -- '--with-http-parser' configure && flags+=(--with-http-parser)
# accounting_storage/mysql: mysql_config (libmariadb-dev-compat) or mariadb_config.
if command -v mysql_config >/dev/null; then
    flags+=(--with-mysql_config=/usr/bin)
fi
say "configure ${flags[*]} (log $LOG)"
./configure "${flags[@]}" >"$LOG" 2>&1 || {
    tail -n 30 "$LOG" >&2
    die "configure failed; see $LOG and $SRC/config.log"
}
# What configure found, for the record (it goes on silently without a library).
grep -iE "checking for (munge|json|http.parser|yaml|jwt|mysql|mariadb)|MySQL|http_parser|yaml|jwt" "$LOG" |
    grep -viE "^checking for .*\.h\.\.\. " | tail -n 20 || true
grep -q '^#define HAVE_MYSQL 1' config.h 2>/dev/null || grep -qE "^WITH_MYSQL_TRUE=''" config.status ||
    die "configure did not find MySQL/MariaDB (slurmdbd needs accounting_storage/mysql)"

# 4. Build and install.
say "make -j$JOBS"
make -j"$JOBS" >>"$LOG" 2>&1 || {
    tail -n 40 "$LOG" >&2
    die "make failed; see $LOG"
}
say "make install"
make install >>"$LOG" 2>&1 || {
    tail -n 30 "$LOG" >&2
    die "make install failed; see $LOG"
}
for b in sbin/slurmctld sbin/slurmd sbin/slurmdbd sbin/slurmrestd bin/squeue bin/sacct; do
    [ -x "$PREFIX/$b" ] || die "$PREFIX/$b missing after make install"
done
ls "$PREFIX"/lib/slurm/accounting_storage_mysql.so >/dev/null || die "accounting_storage_mysql.so missing"
echo "$TAG" >"$PREFIX/.built-from"
say "built $TAG into $PREFIX in $(($(date +%s) - T0))s"

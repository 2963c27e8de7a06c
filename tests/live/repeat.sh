#!/bin/bash
# The live tests N times in a row under B CPU burners (issue 22: "10 times in a row
# under load, no failure"): a flaky live test shows here before it costs a CI run.
#
#   bash tests/live/repeat.sh [N=10] [B=2]     # from a checkout with its .venv
#
# Each run's output goes to $OUT/run-K.log (OUT defaults to a new temporary folder),
# one line per run to $OUT/summary; exits 1 if any run failed.  Nothing else may use
# the machine's Slurm meanwhile (the tests take its lock per session).
set -u
cd "$(dirname "$0")/../.."
runs=${1:-10} burners=${2:-2}
OUT=${OUT:-$(mktemp -d /tmp/jobtap-live-repeat.XXXXXX)}
pids=()
for _ in $(seq 1 "$burners"); do yes >/dev/null & pids+=($!); done
trap '[ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null' EXIT
failed=0
for i in $(seq 1 "$runs"); do
    t0=$(date +%s)
    .venv/bin/pytest -p no:cacheprovider -q tests/live >"$OUT/run-$i.log" 2>&1
    rc=$?
    [ "$rc" = 0 ] || failed=1
    echo "run $i: rc=$rc $(($(date +%s) - t0))s $(tail -n 1 "$OUT/run-$i.log")" | tee -a "$OUT/summary"
done
exit "$failed"

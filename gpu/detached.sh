#!/usr/bin/env bash
# Runs the GPU suite, or a plan of run.sh invocations, detached from the command that
# starts it, so that work longer than one remote command may run (the lent machines
# allow 10 minutes a command) goes on between commands on the same machine.
#
#   bash gpu-bundle/detached.sh [PLAN]   first call: copies the bundle to $WORK, starts
#                                        PLAN there (a bash file, run in the bundle's
#                                        copy with OUT set to the log folder; default:
#                                        `bash run.sh`), then waits as a later call does
#   bash gpu-bundle/detached.sh          later calls: wait up to POLL_SECONDS (540) for
#                                        the plan to end, print its output's tail and
#                                        pack its logs into $OUT/detached.tgz
#
# The copy matters: each remote command replaces the carried bundle, under a plan
# that still reads it. A machine left idle goes back, and the plan with it: call
# again at once while the plan runs.
set -u
bundle=$(cd "$(dirname "$0")" && pwd)
work=${WORK:-/tmp/gpurt-detached}
if [ ! -e "$work/started" ]; then
    rm -rf "$work"
    mkdir -p "$work/logs"
    cp -r "$bundle" "$work/bundle"
    if [ -n "${1:-}" ]; then cp "$1" "$work/plan.sh"; else echo 'bash run.sh' > "$work/plan.sh"; fi
    touch "$work/started"
    (cd "$work/bundle" && OUT="$work/logs" setsid nohup bash -c \
        'bash ../plan.sh > ../plan.txt 2>&1; echo "exit $? at $(date +%T)" > ../finished' > /dev/null 2>&1 &)
fi
deadline=$((SECONDS + ${POLL_SECONDS:-540}))
while [ ! -e "$work/finished" ] && [ "$SECONDS" -lt "$deadline" ]; do sleep 5; done
tail -n 80 "$work/plan.txt" 2>/dev/null
if [ -e "$work/finished" ]; then
    echo "detached: the plan ended, $(cat "$work/finished")"
else
    echo "detached: the plan is still running; call again at once"
fi
tar czf "${OUT:-$work}/detached.tgz" -C "$work" plan.txt logs 2>/dev/null
true

#!/bin/sh
# Starts `cpmserve serve` on a tiny model, sends it hostile requests (hostile_requests.py), then
# stops it; fails on any 5xx, malformed error, dropped connection or unclean exit.
# usage: run_hostile_requests.sh CPMSERVE MAKE_TINY_MODEL PYTHON3 WORK_DIR
set -u
CPMSERVE=$1 MAKE_TINY=$2 PYTHON=$3 WORK=$4
HERE=$(dirname "$0")
. "$HERE/../tiny_server.sh"
start_tiny_server "$CPMSERVE" "$MAKE_TINY" "$WORK"
"$PYTHON" "$HERE/hostile_requests.py" "$PORT"
stop_tiny_server $?

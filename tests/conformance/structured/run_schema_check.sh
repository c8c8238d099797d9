#!/bin/sh
# Starts `cpmserve serve` on a tiny model, sends it random JSON schemas as structured outputs
# and validates every complete reply with the `jsonschema` Python package (the reference for
# what a schema allows), then stops the server. Exit 77 (skipped) without jsonschema.
# usage: run_schema_check.sh CPMSERVE MAKE_TINY_MODEL PYTHON3 WORK_DIR
set -u
CPMSERVE=$1 MAKE_TINY=$2 PYTHON=$3 WORK=$4
HERE=$(dirname "$0")
"$PYTHON" -c "import jsonschema" 2>/dev/null || { echo "python jsonschema missing: skipped"; exit 77; }
. "$HERE/../tiny_server.sh"
start_tiny_server "$CPMSERVE" "$MAKE_TINY" "$WORK"
"$PYTHON" "$HERE/schema_check.py" "http://127.0.0.1:$PORT" 160
stop_tiny_server $?

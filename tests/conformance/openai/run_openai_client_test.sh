#!/bin/sh
# Starts `cpmserve serve` on a tiny model and a free port, runs the OpenAI npm client test
# against it, and stops the server. Exit 77 (skipped) without node or the openai package.
# usage: run_openai_client_test.sh CPMSERVE MAKE_TINY_MODEL NODE_MODULES WORK_DIR
set -u
CPMSERVE=$1 MAKE_TINY=$2 NODE_MODULES=$3 WORK=$4
HERE=$(dirname "$0")
command -v node >/dev/null 2>&1 || { echo "node not found: skipped"; exit 77; }
[ -f "$NODE_MODULES/openai/package.json" ] || { echo "$NODE_MODULES/openai missing: skipped"; exit 77; }
. "$HERE/../tiny_server.sh"
start_tiny_server "$CPMSERVE" "$MAKE_TINY" "$WORK"
node "$HERE/openai_client_test.js" "http://127.0.0.1:$PORT" "$NODE_MODULES"
stop_tiny_server $?

#!/bin/sh
# Starts `cpmserve serve` on a tiny model and a free port, runs the OpenAI npm client test
# against it, and stops the server. Exit 77 (skipped) without node or the openai package.
# usage: run_openai_client_test.sh CPMSERVE MAKE_TINY_MODEL NODE_MODULES WORK_DIR
set -u
CPMSERVE=$1 MAKE_TINY=$2 NODE_MODULES=$3 WORK=$4
HERE=$(dirname "$0")
command -v node >/dev/null 2>&1 || { echo "node not found: skipped"; exit 77; }
[ -f "$NODE_MODULES/openai/package.json" ] || { echo "$NODE_MODULES/openai missing: skipped"; exit 77; }
rm -rf "$WORK" && mkdir -p "$WORK" || exit 1
"$MAKE_TINY" "$WORK/model" || exit 1
LOG="$WORK/server.log"
"$CPMSERVE" serve "$WORK/model" --host 127.0.0.1 --port 0 --served-model-name tiny \
  --kv-cache-memory-bytes 4M --threads 2 >"$LOG" 2>&1 &
PID=$!
PORT=
i=0
while [ $i -lt 600 ]; do
  PORT=$(sed -n 's/.*listening on http:\/\/[^ ]*:\([0-9][0-9]*\).*/\1/p' "$LOG" | head -n 1)
  if [ -n "$PORT" ] && node -e "fetch('http://127.0.0.1:$PORT/health').then(r=>process.exit(r.status==200?0:1),()=>process.exit(1))"; then
    break
  fi
  kill -0 $PID 2>/dev/null || { cat "$LOG"; exit 1; }
  sleep 0.1
  i=$((i + 1))
done
node "$HERE/openai_client_test.js" "http://127.0.0.1:$PORT" "$NODE_MODULES"
RC=$?
kill -TERM $PID
wait $PID
SRV=$?
[ $SRV -eq 0 ] || { echo "server exited with $SRV"; cat "$LOG"; [ $RC -ne 0 ] || RC=1; }
[ $RC -eq 0 ] || tail -n 30 "$LOG"
exit $RC

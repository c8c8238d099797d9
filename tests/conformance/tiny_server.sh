# Sourced by the conformance runners that drive `cpmserve serve` with an outside client.
#   start_tiny_server CPMSERVE MAKE_TINY_MODEL WORK_DIR: writes the tiny model into WORK_DIR and
#     serves it as "tiny" on a free port; returns once /health answers 200, with PORT, PID and
#     LOG set (exits 1 if the server dies first).
#   stop_tiny_server RC: stops the server gracefully and exits with RC, or 1 if RC was 0 but
#     the server did not exit cleanly; the server's log tail goes out on any failure.
start_tiny_server() {
  rm -rf "$3" && mkdir -p "$3" || exit 1
  "$2" "$3/model" || exit 1
  LOG="$3/server.log"
  "$1" serve "$3/model" --host 127.0.0.1 --port 0 --served-model-name tiny \
    --kv-cache-memory-bytes 4M --threads 2 >"$LOG" 2>&1 &
  PID=$!
  PORT=
  i=0
  while [ $i -lt 600 ]; do
    PORT=$(sed -n 's/.*listening on http:\/\/[^ ]*:\([0-9][0-9]*\).*/\1/p' "$LOG" | head -n 1)
    if [ -n "$PORT" ] && curl -sf -o /dev/null "http://127.0.0.1:$PORT/health"; then
      return 0
    fi
    kill -0 $PID 2>/dev/null || { cat "$LOG"; exit 1; }
    sleep 0.1
    i=$((i + 1))
  done
  echo "server not ready"; kill -TERM $PID; exit 1
}

stop_tiny_server() {
  RC=$1
  kill -TERM $PID
  wait $PID
  SRV=$?
  [ $SRV -eq 0 ] || { echo "server exited with $SRV"; cat "$LOG"; [ $RC -ne 0 ] || RC=1; }
  [ $RC -eq 0 ] || tail -n 30 "$LOG"
  exit $RC
}

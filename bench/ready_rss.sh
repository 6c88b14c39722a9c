#!/usr/bin/env bash
# `troupe run`'s memory at ready: one persona, a fresh SQLite file and keyword index, the
# model's base URL unreachable (nothing is asked of it), as bench/compare.py starts it.
# Prints /proc/PID/status's VmRSS, RssAnon, RssFile and Threads at the first 200 from
# /readyz, and again WAIT seconds later (default 2).
#
#   bench/ready_rss.sh BINARY [WAIT]
#   for i in 1 2 3; do bench/ready_rss.sh base; bench/ready_rss.sh new; done
set -euo pipefail
[[ $# -ge 1 ]] || { sed -n 2,8p "$0" >&2; exit 2; }
bin=$(realpath "$1") wait_s=${2:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/personas"
cat > "$work/personas/bench.json" <<'JSON'
{"name": "Bench", "bio": "A bench persona.", "modelProvider": "openai", "settings": {"model": "gpt-4o-mini"}}
JSON
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cd "$work"
TROUPE_HTTP_ADDR=127.0.0.1:$port TROUPE_DATABASE_URL=sqlite://$work/troupe.db \
  TROUPE_INDEX_DIR=$work/index TROUPE_PERSONAS=$work/personas TROUPE_LOG=warn \
  OPENAI_BASE_URL=http://127.0.0.1:9/v1 OPENAI_API_KEY=unused \
  "$bin" run > /dev/null 2> "$work/log" &
pid=$!
status() { grep -E '^(VmRSS|RssAnon|RssFile|Threads)' "/proc/$pid/status" | tr -s ' \t' ' ' | paste -sd ' ' -; }
for _ in $(seq 3000); do
  curl -sf "http://127.0.0.1:$port/readyz" > /dev/null && break
  kill -0 "$pid" 2> /dev/null || { cat "$work/log" >&2; exit 1; }
  sleep 0.01 # polling a port that is not open yet
done
at_ready=$(status)
sleep "$wait_s"
later=$(status)
kill "$pid"
wait "$pid" || true
echo "at ready: $at_ready | ${wait_s} s later: $later"

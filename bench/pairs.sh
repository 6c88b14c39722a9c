#!/usr/bin/env bash
# Two troupe binaries, alternated, on any `troupe bench` command line: A B, then B A, …
#
#   bench/pairs.sh A_BINARY B_BINARY ROUNDS -- <troupe bench arguments>
#   bench/pairs.sh base new 4 -- --messages 20000 --rooms 1000 --database-url PGDB
#   bench/pairs.sh base new 4 -- --http --clients 16 --messages 20000 --rooms 1000
#
# bench/ab.py does this for the in-process SQLite bench and takes medians; this one is for
# the rest (HTTP, Postgres, NATS, 10,000 rooms). The word PGDB in the arguments becomes a
# fresh Postgres database for each run (createdb/dropdb on 127.0.0.1 as postgres), so no run
# reads another's rows. Rate limits are lifted. One line per run: throughput (the 16
# clients' line over HTTP), one room's latency, RSS, the process's CPU seconds, and each
# phase's CPU and context switches per message (troupe bench's `cost` lines).
set -euo pipefail
[[ $# -ge 4 && $4 == -- ]] || { sed -n 2,5p "$0" >&2; exit 2; }
A=$1 B=$2 rounds=$3
shift 4
export TROUPE_RATE_AGENT_PER_MIN=0 TROUPE_RATE_USER_PER_MIN=0 TROUPE_RATE_ROOM_PER_MIN=0 TROUPE_RATE_API_PER_MIN=0
pg=(-h 127.0.0.1 -U postgres)
for ((r = 1; r <= rounds; r++)); do
  order=(A B); (( r % 2 == 0 )) && order=(B A)
  for side in "${order[@]}"; do
    bin=$A; [[ $side == B ]] && bin=$B
    args=("$@") db=""
    if [[ " ${args[*]} " == *" PGDB "* ]]; then
      db="troupe_pairs_$$_${r}_$side"
      createdb "${pg[@]}" "$db"
      args=("${args[@]/#PGDB/postgres://postgres@127.0.0.1:5432/$db}")
    fi
    out=$( { /usr/bin/time -f "cpu %U+%S s" "$bin" bench "${args[@]}"; } 2>&1 ) || { echo "$out" >&2; exit 1; }
    [[ -n $db ]] && dropdb "${pg[@]}" "$db"
    tput=$(grep -E '^(16 clients|[0-9]+ clients|throughput)' <<<"$out" | grep -oE '[0-9]+ messages/s.*' | head -1)
    lat=$(grep -oE 'p50 [0-9.]+ ms +p90 [0-9.]+ ms +p99 [0-9.]+ ms' <<<"$out" | head -1)
    rss=$(grep -oE 'RSS idle / peak.*' <<<"$out" | tr -s ' ')
    cpu=$(grep -oE '^cpu .*' <<<"$out")
    # Per message, each phase (one room / client, then all at once): CPU ms, context switches.
    cost=$( { grep -E '^cost, ' <<<"$out" || true; } | sed -E 's/^cost, *([^ ]+ [^ ]+) +CPU ([0-9.]+) ms\/message +([0-9.]+) context.*/\1 \2 ms \3 cs/' | paste -sd ';' - || true)
    echo "round $r $side: $tput | one room $lat | $rss | $cpu | per message: $cost"
  done
done

#!/usr/bin/env bash
# troupe against elizaOS 1.7.2, side by side on this machine: one command.
#
#   bench/compare.sh                          # builds target/release/troupe if needed
#   TROUPE_BIN=/path/to/troupe bench/compare.sh
#   ROUNDS=4 LATENCY_MESSAGES=500 bench/compare.sh --json /tmp/side-by-side.json
#
# It installs @elizaos/core, @elizaos/plugin-sql and @elizaos/plugin-bootstrap at exactly
# 1.7.2, and bun from npm, into bench/eliza/node_modules (not committed), then runs
# bench/compare.py, which alternates the runs and prints the table. See bench/README.md.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"

need() { command -v "$1" >/dev/null || { echo "compare.sh: $1 is needed ($2)" >&2; exit 1; }; }
need python3 "the driver"
need npm "to install elizaOS and bun"

# elizaOS and bun, pinned in bench/eliza/package.json; reinstalled when that file changes.
stamp="$here/eliza/node_modules/.troupe-bench-installed"
if [[ ! -f "$stamp" || "$here/eliza/package.json" -nt "$stamp" ]]; then
  echo "compare.sh: installing elizaOS 1.7.2 and bun into bench/eliza/node_modules" >&2
  (cd "$here/eliza" && npm install --no-audit --no-fund --loglevel=error)
  for p in core plugin-sql plugin-bootstrap; do
    v="$(node -p "require('$here/eliza/node_modules/@elizaos/$p/package.json').version")"
    [[ "$v" == 1.7.2 ]] || { echo "compare.sh: @elizaos/$p is $v, not 1.7.2" >&2; exit 1; }
  done
  touch "$stamp"
fi

if [[ -z "${TROUPE_BIN:-}" ]]; then
  TROUPE_BIN="$root/target/release/troupe"
  if [[ ! -x "$TROUPE_BIN" ]]; then
    echo "compare.sh: building the release binary (cargo build --release --bin troupe)" >&2
    (cd "$root" && cargo build --release --locked --bin troupe)
  fi
fi
export TROUPE_BIN
exec python3 "$here/compare.py" "$@"

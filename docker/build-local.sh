#!/usr/bin/env bash
# Builds troupe's runtime image with podman, without pulling any base image, runs it against
# the local Postgres and NATS, checks /readyz and a reply, and prints the image's size.
#
#   docker/build-local.sh                        # build the release binary, image, smoke test
#   TROUPE_BIN=path/to/troupe docker/build-local.sh   # use this binary as it is
#   SMOKE=0 docker/build-local.sh                # build only
#
# Settings (environment): IMAGE (troupe:local), DATABASE_ADMIN_URL
# (postgres://postgres@127.0.0.1:5432/postgres: a fresh database is made there and dropped
# after) and NATS_URL (nats://127.0.0.1:4222).
#
# podman needs three things on this kind of machine (docs/deploy.md): the vfs storage driver
# and the runc runtime (both passed below; apt-get install -y podman buildah runc), and
# `default_ulimits = []` under `[containers]` in /etc/containers/containers.conf. The image is docker/Dockerfile's runtime stage, built from
# a tree docker/rootfs.sh assembles here, so both builds give the same layout.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
IMAGE="${IMAGE:-troupe:local}"
DATABASE_ADMIN_URL="${DATABASE_ADMIN_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
NATS_URL="${NATS_URL:-nats://127.0.0.1:4222}"
SMOKE="${SMOKE:-1}"
# runc, not crun: Debian's crun refuses this machine's hybrid cgroup layout ("cgroups in hybrid
# mode not supported"); runc (apt-get install -y runc) runs it.
podman=(podman --storage-driver vfs)
command -v runc >/dev/null && podman+=(--runtime runc)

say() { echo "build-local: $*" >&2; }
die() { say "$*"; exit 1; }
command -v podman >/dev/null || die "podman is not installed (apt-get install -y podman buildah)"
if ! grep -qs '^default_ulimits *= *\[\]' /etc/containers/containers.conf; then
  say "warning: /etc/containers/containers.conf has no 'default_ulimits = []'; runc may fail to set rlimits"
fi

# 1. The release binary, linked statically as docker/Dockerfile links it (glibc included:
# the image then holds no shared library at all).
if [[ -z "${TROUPE_BIN:-}" ]]; then
  host="$(rustc -vV | sed -n 's/^host: //p')"
  say "RUSTFLAGS='-C target-feature=+crt-static' cargo build --release --locked --bin troupe --target $host"
  (cd "$root" && RUSTFLAGS="-C target-feature=+crt-static" \
     cargo build --release --locked --bin troupe --target "$host")
  TROUPE_BIN="$root/target/$host/release/troupe"
fi
TROUPE_BIN="$(cd "$(dirname "$TROUPE_BIN")" && pwd)/$(basename "$TROUPE_BIN")"

# 2. The tree, and a build file: a stage holding it, then Dockerfile's runtime stage as is.
ctx="$(mktemp -d)"
cleanup() {
  [[ -n "${container:-}" ]] && "${podman[@]}" rm -f "$container" >/dev/null 2>&1 || true
  [[ -n "${fake_pid:-}" ]] && kill "$fake_pid" 2>/dev/null || true
  [[ -n "${db:-}" ]] && psql -q "$DATABASE_ADMIN_URL" -c "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true
  rm -rf "$ctx"
}
trap cleanup EXIT
"$root/docker/rootfs.sh" "$TROUPE_BIN" "$ctx/rootfs"
{
  echo "FROM scratch AS rootfs"
  echo "COPY rootfs /rootfs"
  sed -n '/^# --- runtime/,$p' "$root/docker/Dockerfile"
} > "$ctx/Containerfile"
# --format docker keeps HEALTHCHECK (the OCI format has no field for it).
say "podman build -t $IMAGE"
"${podman[@]}" build --quiet --format docker -t "$IMAGE" -f "$ctx/Containerfile" "$ctx" >/dev/null

# 3. What the image weighs, and of what.
size="$("${podman[@]}" image inspect --format '{{.Size}}' "$IMAGE")"
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB (%.1f MB)", b / 1048576, b / 1e6 }'; }
bytes() { du -sb "$@" | awk '{ s += $1 } END { print s }'; }
bin_bytes="$(stat -c %s "$ctx/rootfs/root/usr/local/bin/troupe")"
lib_bytes="$(bytes "$ctx/rootfs/root/lib" "$ctx/rootfs/root/lib64" 2>/dev/null || echo 0)"
[[ -d "$ctx/rootfs/root/usr/lib" ]] && lib_bytes=$((lib_bytes + $(bytes "$ctx/rootfs/root/usr/lib")))
gz_bytes="$("${podman[@]}" image save --format docker-archive "$IMAGE" 2>/dev/null | gzip -6 | wc -c)"
say "image $IMAGE: $(mib "$size")"
say "  troupe binary      $(mib "$bin_bytes")"
if [[ "$lib_bytes" -gt 0 ]]; then
  say "  shared libraries   $(mib "$lib_bytes") ($(cd "$ctx/rootfs/root" && find lib* usr/lib -type f 2>/dev/null | tr '\n' ' ' || true))"
else
  say "  shared libraries   none (a static binary)"
fi
say "  CA certificates    $(mib "$(stat -c %s "$ctx/rootfs/root/etc/ssl/certs/ca-certificates.crt")")"
say "  personas, migrations $(mib "$(bytes "$ctx/rootfs/root/app")")"
say "  gzip of the saved image (about what a registry stores): $(mib "$gz_bytes")"
[[ "$SMOKE" == 0 ]] && exit 0

# 4. Smoke test: a fresh database, a stream prefix of its own, a stand-in model; the image's
# own settings otherwise (0.0.0.0 with an API token, the default persona).
command -v psql >/dev/null || die "psql is needed for the smoke test's fresh database (or SMOKE=0)"
command -v curl >/dev/null || die "curl is needed for the smoke test (or SMOKE=0)"
run_id="$(date +%s)$$"
db="troupe_smoke_$run_id"
psql -q "$DATABASE_ADMIN_URL" -c "CREATE DATABASE $db" >/dev/null
coproc FAKE { exec python3 "$root/docker/fake-model.py" "Hello from the smoke test model."; }
fake_pid="$FAKE_PID"
read -r fake_port <&"${FAKE[0]}"
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
token="smoke-$run_id"
# The database by the name `localhost`, not an address: the static binary's resolver (glibc's
# built-in `files` lookup of the container's /etc/hosts) is part of what is tested.
base="${DATABASE_ADMIN_URL%/*}"
base="${base/127.0.0.1/localhost}"
# Starts the image as container $1 on this run's port, the stand-in model and the API token;
# further arguments are more podman options (-e …). --no-healthcheck: podman schedules
# health checks with systemd timers, and there is no systemd here; the check is run by hand.
start() {
  container="$1"
  shift
  started="$(date +%s%N)"
  "${podman[@]}" run -d --no-healthcheck --name "$container" --network host \
    -e TROUPE_HTTP_ADDR="0.0.0.0:$port" \
    -e TROUPE_API_TOKEN="$token" \
    -e OPENAI_BASE_URL="http://127.0.0.1:$fake_port/v1" \
    -e OPENAI_API_KEY=smoke \
    "$@" "$IMAGE" >/dev/null
}
start "troupe-smoke-$run_id" \
  -e TROUPE_DATABASE_URL="$base/$db" \
  -e TROUPE_BUS_URL="$NATS_URL" \
  -e TROUPE_BUS_PREFIX="smoke$run_id"

# Waits for /readyz of the container $1 on port $2 (at most a minute), then asks for a reply.
ready_and_answering() {
  local name="$1" port="$2" ready="" answer reply
  for _ in $(seq 1 600); do
    if [[ "$("${podman[@]}" inspect --format '{{.State.Running}}' "$name")" != true ]]; then
      "${podman[@]}" logs "$name" >&2 || true
      die "the container $name stopped before it was ready"
    fi
    # Waiting for the server to start listening, in 100 ms steps for at most a minute.
    if ready="$(curl -sf "http://127.0.0.1:$port/readyz")"; then break; fi
    sleep 0.1
  done
  [[ -n "$ready" ]] || { "${podman[@]}" logs "$name" >&2; die "/readyz did not answer 200 within a minute"; }
  say "/readyz 200 after $(( ($(date +%s%N) - started) / 1000000 )) ms (podman run to ready): $ready"
  answer="$(curl -sS -X POST "http://127.0.0.1:$port/api/agents/troupe/messages" \
    -H "authorization: Bearer $token" -H 'content-type: application/json' \
    -d '{"text": "hello from the smoke test", "roomId": "smoke", "userId": "u-smoke", "userName": "Smoke"}')"
  reply="$(jq -r '.replies[0].text // empty' <<<"$answer")"
  [[ "$reply" == "Hello from the smoke test model." ]] \
    || { "${podman[@]}" logs "$name" >&2; die "no reply from the model; the API answered: $answer"; }
  say "reply: \"$reply\" (the stand-in model has been asked $(curl -sf "http://127.0.0.1:$fake_port/calls" | jq -r .calls) time(s))"
}
ready_and_answering "$container" "$port"

# The image's health check, as the engine would run it: the container's own environment
# (TROUPE_HTTP_ADDR names this run's port).
"${podman[@]}" exec "$container" /usr/local/bin/troupe healthcheck \
  || die "the health check (troupe healthcheck) failed inside the container"
say "health check (troupe healthcheck): ok"
pid="$("${podman[@]}" inspect --format '{{.State.Pid}}' "$container")"
say "resident memory after one reply: $(awk '/^VmRSS/ { printf "%.1f MiB", $2 / 1024 }' "/proc/$pid/status")"

# The image's own defaults: SQLite and the index on the /data volume, which must be the
# runtime user's to write (an anonymous volume takes the image directory's owner).
"${podman[@]}" rm -f "$container" >/dev/null
start "troupe-smoke-sqlite-$run_id"
say "again on the image's defaults (SQLite on the /data volume):"
ready_and_answering "$container" "$port"
say "ok: $IMAGE built, ready and answering; size $(mib "$size")"

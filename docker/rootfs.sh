#!/usr/bin/env bash
# Assembles the runtime image's whole file tree in a directory, for a `FROM scratch` image.
#
#   docker/rootfs.sh TROUPE_BINARY OUT_DIR
#
# OUT_DIR/root is the tree owned by root; OUT_DIR/nonroot holds the directories that belong
# to the user troupe runs as (/data, /home/nonroot). They are two trees because COPY sets no
# owner on a directory that exists already: the runtime stage copies the first as it is and
# the second with --chown=65532:65532, onto /, so both directories are created owned by it.
#
# Used by both builds, so that they produce the same layout: docker/Dockerfile runs it in its
# build stage (Debian bookworm), docker/build-local.sh on the host. What goes in:
#   /usr/local/bin/troupe          the release binary; both builds link it statically
#                                  (`crt-static`), so nothing else is needed to run it
#   /lib…, /usr/lib…               for a dynamically linked binary only: every shared
#                                  library `ldd` lists for it, and the dynamic loader, at the
#                                  paths the binary asks for (glibc: libc, libm, libgcc_s;
#                                  rustls needs no OpenSSL)
#   /etc/ssl/certs/ca-certificates.crt   the CA bundle (reqwest's rustls verifier reads the
#                                  system store; this is the path it looks in first)
#   /etc/passwd, /etc/group        root and `nonroot` (65532), the user troupe runs as
#   /app/personas, /app/migrations the default persona, and the SQL files (the binary embeds
#                                  the migrations with sqlx::migrate! and applies them at
#                                  start; the files are there to be read)
#   /tmp (1777)                    temporary files
#   nonroot: /data, /home/nonroot  the SQLite default and the index; the user's home;
#            /models               the local embedding model (`troupe models pull`, a volume)
set -euo pipefail

bin="${1:?usage: rootfs.sh TROUPE_BINARY OUT_DIR}"
out="${2:?usage: rootfs.sh TROUPE_BINARY OUT_DIR}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

[[ -x "$bin" ]] || { echo "rootfs.sh: $bin is not an executable" >&2; exit 1; }
if [[ -e "$out" && -n "$(ls -A "$out")" ]]; then
  echo "rootfs.sh: $out is not empty" >&2
  exit 1
fi
nonroot="$out/nonroot"
out="$out/root"
mkdir -p "$out" "$nonroot"

install -D -m 0755 "$bin" "$out/usr/local/bin/troupe"

# Each library at the path ldd resolved it to, and the loader at the path in PT_INTERP
# (/lib64/ld-linux-x86-64.so.2 on x86_64), which ldd prints as a line without "=>".
# `cp -L` copies the file a symlink points to under the symlink's name.
libs="$(ldd "$bin" | awk '/=> \// {print $3} /^\s*\/[^ ]+ \(/ {print $1}')"
if ldd "$bin" | grep -q "not found"; then
  echo "rootfs.sh: ldd cannot resolve every library of $bin:" >&2
  ldd "$bin" >&2
  exit 1
fi
for lib in $libs; do
  mkdir -p "$out$(dirname "$lib")"
  cp -L "$lib" "$out$lib"
done

install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$out/etc/ssl/certs/ca-certificates.crt"

mkdir -p "$out/etc"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' \
  > "$out/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' > "$out/etc/group"

mkdir -p "$out/app"
cp -r "$root/personas" "$out/app/personas"
cp -r "$root/migrations" "$out/app/migrations"

mkdir -p "$out/tmp" "$out/home" "$nonroot/data" "$nonroot/models" "$nonroot/home/nonroot"
chmod 1777 "$out/tmp"

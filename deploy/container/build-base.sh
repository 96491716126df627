#!/usr/bin/env bash
# A local Debian bookworm base image for the cleanerd Dockerfile, for machines that reach Debian's
# package mirror but no container registry: debootstrap (minbase) straight into a buildah scratch
# container, plus only what the Dockerfile's stages need (Debian's python3.11 and venv, passwd for
# useradd, CA certificates for pip), committed under a local name.
#
#   deploy/container/build-base.sh [IMAGE] [MIRROR]
#
# IMAGE defaults to localhost/cleanerd-base:bookworm. MIRROR defaults to the Debian mirror this
# machine's apt uses (from /etc/apt/sources.list*), else deb.debian.org. Needs root (debootstrap),
# buildah and debootstrap. buildah's storage is the caller's: set CONTAINERS_STORAGE_CONF to build
# in a private store. Then:
#
#   buildah bud --isolation chroot --build-arg BASE_IMAGE=localhost/cleanerd-base:bookworm \
#       -t cleanerd:latest .
set -euo pipefail

image=${1:-localhost/cleanerd-base:bookworm}
suite=bookworm

# The machine's own mirror: deb822 "URIs:" of a stanza for $suite, or a one-line "deb URL $suite".
apt_mirror() {
    local f
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list; do
        [ -r "$f" ] || continue
        awk -v suite="$suite" '
            /^[[:space:]]*#/ { next }
            /^deb[[:space:]]/ {
                i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
                if ($(i + 1) == suite && $i ~ /\/debian\/?$/) { print $i; exit }
                next
            }
            /^URIs:/ { uri = $2 }
            /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == suite && uri ~ /\/debian\/?$/) { print uri; exit } }
            /^[[:space:]]*$/ { uri = "" }
        ' "$f"
    done | head -n 1
}

mirror=${2:-$(apt_mirror)}
mirror=${mirror:-http://deb.debian.org/debian}

ctr=$(buildah from scratch)
cleanup() { buildah rm "$ctr" >/dev/null 2>&1 || true; }
trap cleanup EXIT
root=$(buildah mount "$ctr")

echo "build-base: debootstrap $suite from $mirror into $image" >&2
debootstrap --variant=minbase \
    --include=python3.11,python3-venv,passwd,ca-certificates \
    "$suite" "$root" "$mirror" >&2
# The image is a base, not a system: no apt lists or caches, and the mirror the image's apt uses
# is the one it was built from.
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/archives/*.deb "$root"/var/log/*.log
buildah umount "$ctr" >/dev/null

buildah config \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 \
    --cmd python3 \
    --label org.opencontainers.image.title="Debian $suite with python3.11 (cleanerd base)" \
    --label org.opencontainers.image.base.name="debootstrap $suite $mirror" \
    "$ctr"
buildah commit --quiet "$ctr" "$image" >/dev/null
echo "$image"

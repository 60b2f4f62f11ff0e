#!/usr/bin/env bash
# Make a plain Debian base image without a registry: debootstrap a minimal root file system
# from Debian's archive and `docker import` it.
#
#   sudo scripts/make_base_image.sh [IMAGE]      # default kernel-eval-base:bookworm
#
# Used by scripts/docker_smoke.sh where no image registry is reachable; on a host that can
# pull images, `debian:bookworm` does the same job. Needs root, debootstrap and a running
# Docker daemon. Environment: SUITE (default bookworm), MIRROR (default
# http://deb.debian.org/debian).
#
# The image trusts the CA certificates this host added locally (/usr/local/share/
# ca-certificates), e.g. an HTTPS proxy's, so that `pip install` inside `docker build` reaches
# PyPI the way the host does. Such an image is for local builds; do not push it.
set -euo pipefail

IMAGE=${1:-kernel-eval-base:bookworm}
SUITE=${SUITE:-bookworm}
MIRROR=${MIRROR:-http://deb.debian.org/debian}

[ "$(id -u)" = 0 ] || { echo "make_base_image.sh: needs root (debootstrap, chroot)" >&2; exit 2; }
command -v debootstrap >/dev/null || { echo "make_base_image.sh: apt-get install debootstrap" >&2; exit 2; }
docker info >/dev/null 2>&1 || { echo "make_base_image.sh: no Docker daemon answers" >&2; exit 2; }

ROOTFS=$(mktemp -d /tmp/kernel-eval-rootfs.XXXXXX)
chmod 755 "$ROOTFS"  # it becomes the image's /
cleanup() {
    # debootstrap mounts /proc and /sys in the target; a failed run may leave them there.
    awk -v root="$ROOTFS/" 'index($2, root) == 1 {print $2}' /proc/mounts | sort -r \
        | xargs -r -n1 umount -l
    rm -rf --one-file-system "$ROOTFS"
}
trap cleanup EXIT

echo "debootstrap $SUITE from $MIRROR ..."
debootstrap --variant=minbase --include=ca-certificates "$SUITE" "$ROOTFS" "$MIRROR" \
    > "$ROOTFS.log" 2>&1 || { tail -20 "$ROOTFS.log" >&2; rm -f "$ROOTFS.log"; exit 1; }
rm -f "$ROOTFS.log"

# The same sources as Debian's own container image: the release, its updates and security.
rm -f "$ROOTFS/etc/apt/sources.list"
cat > "$ROOTFS/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF

if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$ROOTFS/usr/local/share/ca-certificates/"
    chroot "$ROOTFS" update-ca-certificates >/dev/null 2>&1
fi

# No package lists, caches or logs in the image; images built on it run apt-get update first.
rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/*.bin \
       "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/log/*.log "$ROOTFS"/tmp/*

tar -C "$ROOTFS" --numeric-owner -c . \
    | docker import --change 'CMD ["bash"]' --change 'ENV LANG=C.UTF-8' \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --message "debootstrap --variant=minbase $SUITE $MIRROR" - "$IMAGE" >/dev/null
echo "made $IMAGE ($(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{printf "%d MB", $1/1e6}'))"

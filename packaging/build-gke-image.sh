#!/usr/bin/env bash
# build-gke-image.sh DEB OUT.tar [--root CACHED_ROOT] [--tag TAG]
#
# Builds the container image of tensorfs for GKE's Cloud Storage FUSE CSI
# driver (docs/GKE.md) without a registry or a container engine: a Debian 12
# minimal root (debootstrap --variant=minbase with what tensorfs needs at run
# time), the tensorfs package DEB installed in it, docs, man pages, locales
# and apt's lists left out; ENTRYPOINT ["tensorfs", "gke-sidecar"], user
# 65534:65534. Written with umoci as an OCI image layout in a tar, OUT.tar (an
# "oci-archive"), tagged TAG (default: the package's version), for
#   skopeo copy oci-archive:OUT.tar:TAG docker://REGISTRY/tensorfs:TAG
#
# --root CACHED_ROOT starts from an existing Debian 12 root (such as the one
# tests/systemd/boot_test.sh debootstraps) instead of running debootstrap: it
# is read through an overlay and left unchanged. What it lacks of tensorfs'
# dependencies is installed with apt from the mirror apt uses. Either way only
# Debian's essential packages and what tensorfs needs stay in the image.
#
# Needs root, debootstrap (unless --root), umoci (packaging/install-deps.sh
# installs both). Prints the image's size.
set -euo pipefail

usage() {
  echo "usage: build-gke-image.sh DEB OUT.tar [--root CACHED_ROOT] [--tag TAG]" >&2
  exit 2
}
[[ $# -ge 2 ]] || usage
deb=$(realpath "$1")
out=$(realpath -m "$2")
shift 2
cached=""
tag=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --root) cached=$(realpath "${2:?--root needs a directory}"); shift 2 ;;
    --tag) tag=${2:?--tag needs a value}; shift 2 ;;
    *) usage ;;
  esac
done
die() {
  echo "build-gke-image: $*" >&2
  exit 1
}
[[ $(id -u) -eq 0 ]] || die "run as root (debootstrap, chroot, an overlay mount)"
[[ -f $deb ]] || die "$deb is not a file"
command -v umoci >/dev/null || die "umoci is not installed (packaging/install-deps.sh installs it)"
[[ -z $cached ]] || [[ -x $cached/usr/bin/dpkg ]] || die "$cached is not a Debian root"
[[ -n $cached ]] || command -v debootstrap >/dev/null || die "debootstrap is not installed"
tag=${tag:-$(dpkg-deb -f "$deb" Version)}

mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
[[ -n $mirror ]] ||
  mirror=$(awk '$1 == "deb" && $3 == "bookworm" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
mirror=${mirror:-http://deb.debian.org/debian}
# What the package depends on (and the CA certificates an https endpoint needs), so
# that installing it needs no download.
include=fuse3,libfuse3-3,libcurl4,libssl3,libspdlog1.10,libfmt9,libsystemd0,ca-certificates

work=$(mktemp -d /tmp/tensorfs-gke-image.XXXXXX)
root=$work/root
overlay=0
cleanup() {
  set +e
  for m in proc dev; do mountpoint -q "$root/$m" && umount -l "$root/$m"; done
  [[ $overlay -eq 1 ]] && umount -l "$root"
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$root"

start=$SECONDS
if [[ -n $cached ]]; then
  echo "== a root over $cached"
  mkdir -p "$work/upper" "$work/overlay-work"
  mount -t overlay overlay -o "lowerdir=$cached,upperdir=$work/upper,workdir=$work/overlay-work" "$root"
  overlay=1
else
  echo "== debootstrap --variant=minbase bookworm from $mirror"
  debootstrap --variant=minbase --include="$include" bookworm "$root" "$mirror" >"$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log"; die "debootstrap failed"; }
fi

echo "== install $(basename "$deb")"
mount -t proc proc "$root/proc"
mount --bind /dev "$root/dev"
cp "$deb" "$root/tmp/tensorfs.deb"
in_root() { chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive "$@"; }
installed() { [[ "$(in_root dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" == installed ]]; }
if ! in_root dpkg -i /tmp/tensorfs.deb >"$work/dpkg.log" 2>&1 || ! installed ca-certificates; then
  # Dependencies missing from the root: from the mirror.
  cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
  printf 'deb %s bookworm main\n' "$mirror" >"$root/etc/apt/sources.list"
  { in_root apt-get update -qq && in_root apt-get -f install -y -qq --no-install-recommends &&
    in_root apt-get install -y -qq --no-install-recommends ca-certificates; } >>"$work/dpkg.log" 2>&1 ||
    { tail -20 "$work/dpkg.log"; die "installing $(basename "$deb") failed"; }
fi
# Only tensorfs, the CA certificates and what they need stay, besides Debian's
# essential packages: the rest (systemd and dbus from a root made for booting...) goes.
in_root apt-mark auto $(in_root dpkg-query -W -f='${binary:Package}\n') >>"$work/dpkg.log" 2>&1
in_root apt-mark manual tensorfs ca-certificates >>"$work/dpkg.log" 2>&1
in_root apt-get autoremove -y -qq --purge >>"$work/dpkg.log" 2>&1 ||
  { tail -20 "$work/dpkg.log"; die "removing what tensorfs does not need failed"; }
in_root tensorfs --help >/dev/null || die "tensorfs does not run in the root"
umount "$root/proc" "$root/dev"

echo "== trim"
rm -f "$root/tmp/tensorfs.deb"
# Each package's copyright file stays.
find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete 2>/dev/null || true
find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete 2>/dev/null || true
rm -rf "$root"/usr/share/{man,info,lintian,linda} "$root"/usr/share/locale/* "$root"/usr/share/i18n \
  "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/cache/debconf/*-old "$root"/var/log/* \
  "$root"/var/lib/dpkg/*-old "$root"/etc/resolv.conf "$root"/tmp/* "$root"/root/.bash_history
: >"$root/etc/machine-id"
# The pod's emptyDirs (see fs/gke_sidecar.h); the root itself is read-only in the pod.
mkdir -p "$root"/gcsfuse-tmp "$root"/gcsfuse-buffer "$root"/gcsfuse-cache

echo "== OCI image"
layout=$work/oci
umoci init --layout "$layout"
umoci new --image "$layout:$tag"
umoci insert --image "$layout:$tag" --history.created_by "build-gke-image.sh $(basename "$deb")" "$root" /
umoci config --image "$layout:$tag" --config.entrypoint tensorfs --config.entrypoint gke-sidecar \
  --config.user 65534:65534 --config.workingdir / \
  --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --config.label org.opencontainers.image.title=tensorfs \
  --config.label org.opencontainers.image.version="$tag" \
  --config.label \
  org.opencontainers.image.description="tensorfs as the gke-gcsfuse-sidecar of GKE's Cloud Storage FUSE CSI driver"
umoci gc --layout "$layout"
mkdir -p "$(dirname "$out")"
tar -C "$layout" -cf "$out.partial" .
mv "$out.partial" "$out"
echo "wrote $out (tag $tag): $(($(stat -c %s "$out") / 1048576)) MiB in $((SECONDS - start)) s"

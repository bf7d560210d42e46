#!/usr/bin/env bash
# build-eks-image.sh BUILD_DIR OUT.tar [--tag TAG] [--bin-dir DIR] [--driver-version vX.Y.Z]
# build-eks-image.sh BUILD_DIR --bundle-only DIR [--bin-dir DIR]
#
# Makes tensorfs the mount-s3 of the Mountpoint for Amazon S3 CSI driver
# (docs/EKS.md), without a registry or a container engine.
#
# The bundle: tensorfs self-contained, to run on the driver image's userland
# (Amazon Linux, not Debian), in BIN_DIR (default /mountpoint-s3/bin, the
# driver image's MOUNTPOINT_BIN_DIR):
#   BIN_DIR/mount-s3                   a static launcher (packaging/eks/mount_s3_launcher.cc)
#   BIN_DIR/tensorfs/tensorfs          BUILD_DIR/fs/tensorfs, without its debug information
#   BIN_DIR/tensorfs/lib/ld.so         its ELF loader, which the launcher runs it through
#   BIN_DIR/tensorfs/lib/*.so*         every library ldd lists for it
#   BIN_DIR/tensorfs/licenses/         the copyright files of the packages they come from
# The launcher runs lib/ld.so --library-path lib tensorfs with argv[0] kept, so
# tensorfs takes mount-s3's command line (fs/mount_s3.h).
#
# OUT.tar: an OCI image (an "oci-archive", written with umoci) of one layer
# holding the bundle, and empty /dev and /proc: entrypoint BIN_DIR/mount-s3,
# user 1000:1000 (a Mountpoint Pod's), tagged TAG (default: the project's
# version). Next to it, OUT.Dockerfile: the few lines that copy the bundle onto
# public.ecr.aws/mountpoint-s3-csi-driver/aws-mountpoint-s3-csi-driver:VERSION
# (--driver-version, default v2.7.0), for
#   skopeo copy oci-archive:OUT.tar:TAG docker://REGISTRY/tensorfs-mount-s3:TAG
#   docker build --build-arg BUNDLE=REGISTRY/tensorfs-mount-s3:TAG -t IMAGE -f OUT.Dockerfile .
#
# --bundle-only DIR writes just the bundle's BIN_DIR to DIR (no root needed).
#
# BUILD_DIR is a tensorfs build directory (fs/tensorfs and
# packaging/tensorfs-mount-s3-launcher built). Needs binutils and dpkg (the
# libraries' packages), and for the OCI archive root and umoci
# (packaging/install-deps.sh). Prints the bundle's and the archive's sizes.
set -euo pipefail

usage() {
  echo "usage: build-eks-image.sh BUILD_DIR OUT.tar [--tag TAG] [--bin-dir DIR] [--driver-version vX.Y.Z]" >&2
  echo "       build-eks-image.sh BUILD_DIR --bundle-only DIR [--bin-dir DIR]" >&2
  exit 2
}
die() {
  echo "build-eks-image: $*" >&2
  exit 1
}
[[ $# -ge 2 ]] || usage
build=$(realpath "$1")
shift
out=""
bundle_only=""
if [[ $1 == --bundle-only ]]; then
  bundle_only=$(realpath -m "${2:?--bundle-only needs a directory}")
  shift 2
else
  out=$(realpath -m "$1")
  shift
fi
tag=""
bin_dir=/mountpoint-s3/bin
driver_version=v2.7.0
while [[ $# -gt 0 ]]; do
  case $1 in
    --tag) tag=${2:?--tag needs a value}; shift 2 ;;
    --bin-dir) bin_dir=${2:?--bin-dir needs a directory}; shift 2 ;;
    --driver-version) driver_version=${2:?--driver-version needs a version such as v2.7.0}; shift 2 ;;
    *) usage ;;
  esac
done
[[ $bin_dir == /* ]] || die "--bin-dir $bin_dir: give an absolute path (the image's MOUNTPOINT_BIN_DIR)"
[[ $driver_version =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "--driver-version $driver_version: expected vX.Y.Z"
tensorfs=$build/fs/tensorfs
launcher=$build/packaging/tensorfs-mount-s3-launcher
[[ -x $tensorfs ]] || die "$tensorfs is missing: build it (ninja -C $build tensorfs)"
[[ -x $launcher ]] || die "$launcher is missing: build it (ninja -C $build tensorfs-mount-s3-launcher)"
if [[ -z $bundle_only ]]; then
  [[ $(id -u) -eq 0 ]] || die "run as root for the OCI archive (its files owned by root), or use --bundle-only"
  command -v umoci >/dev/null || die "umoci is not installed (packaging/install-deps.sh installs it)"
fi
version=$("$tensorfs" --version | awk '{print $2}')
tag=${tag:-$version}

work=$(mktemp -d /tmp/tensorfs-eks-image.XXXXXX)
trap 'rm -rf "$work"' EXIT
start=$SECONDS
root=$work/root
bin=$root$bin_dir
lib=$bin/tensorfs/lib
mkdir -p "$lib" "$bin/tensorfs/licenses" "$root/dev" "$root/proc"

echo "== bundle $tensorfs"
objcopy --strip-debug "$tensorfs" "$bin/tensorfs/tensorfs"
strip -o "$bin/mount-s3" "$launcher"
# ldd's lines: "libfoo.so.1 => /path/libfoo.so.1 (0x...)" and the loader's "/lib64/ld-linux-x86-64.so.2 (0x...)".
ldd "$tensorfs" >"$work/ldd" || die "ldd $tensorfs failed"
if grep -q "not found" "$work/ldd"; then
  cat "$work/ldd" >&2
  die "$tensorfs needs libraries this machine lacks"
fi
loader=$(awk '$1 ~ /^\// && $2 ~ /^\(/ {print $1}' "$work/ldd")
[[ -n $loader ]] || die "ldd names no ELF loader for $tensorfs"
cp -L "$loader" "$lib/ld.so"
libraries=("$loader")
while read -r name path; do
  cp -L "$path" "$lib/$name"
  libraries+=("$path")
done < <(awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' "$work/ldd")
# The licenses: each library's package's copyright file, and tensorfs' own.
cp "$(dirname "$0")/debian/copyright" "$bin/tensorfs/licenses/tensorfs.copyright"
for path in "${libraries[@]}"; do
  real=$(realpath "$path")
  package=$(dpkg -S "$real" 2>/dev/null || dpkg -S "${real#/usr}" 2>/dev/null || dpkg -S "/usr$real" 2>/dev/null) ||
    die "no package owns $real: cannot ship its license"
  package=${package%%:*}
  cp "/usr/share/doc/$package/copyright" "$bin/tensorfs/licenses/$package.copyright" 2>/dev/null ||
    die "/usr/share/doc/$package/copyright is missing: cannot ship the license of $real"
done
chmod -R u=rwX,go=rX "$root"
chmod 0755 "$bin/mount-s3" "$bin/tensorfs/tensorfs" "$lib/ld.so"
# It runs with nothing from this machine but the bundle: no PATH, no library path.
version=$(env -i "$bin/mount-s3" --version) || die "the bundle's mount-s3 does not run"
grep -q "as mount-s3" <<<"$version" || die "the bundle's mount-s3 does not say it runs as mount-s3: $version"
echo "bundle: $(du -sm "$bin" | cut -f1) MiB, ${#libraries[@]} libraries and the loader $(basename "$loader")"

if [[ -n $bundle_only ]]; then
  rm -rf "$bundle_only"
  mkdir -p "$(dirname "$bundle_only")"
  cp -a "$bin" "$bundle_only"
  echo "wrote $bundle_only"
  exit 0
fi

echo "== OCI image"
layout=$work/oci
umoci init --layout "$layout"
umoci new --image "$layout:$tag"
umoci insert --image "$layout:$tag" --history.created_by "build-eks-image.sh $(basename "$build")" "$root" /
umoci config --image "$layout:$tag" --config.entrypoint "$bin_dir/mount-s3" --config.user 1000:1000 \
  --config.workingdir / \
  --config.label org.opencontainers.image.title=tensorfs-mount-s3 \
  --config.label org.opencontainers.image.version="$tag" \
  --config.label org.opencontainers.image.description="tensorfs as the mount-s3 of the Mountpoint for Amazon S3 CSI driver, in $bin_dir"
umoci gc --layout "$layout"
mkdir -p "$(dirname "$out")"
tar -C "$layout" -cf "$out.partial" .
mv "$out.partial" "$out"

dockerfile=${out%.tar}.Dockerfile
{
  echo "# The Mountpoint for Amazon S3 CSI driver $driver_version with tensorfs as its mount-s3 (docs/EKS.md)."
  echo "# skopeo copy oci-archive:$(basename "$out"):$tag docker://REGISTRY/tensorfs-mount-s3:$tag"
  echo "# docker build --build-arg BUNDLE=REGISTRY/tensorfs-mount-s3:$tag \\"
  echo "#   -t REGISTRY/aws-mountpoint-s3-csi-driver:$driver_version-tensorfs-$tag -f $(basename "$dockerfile") ."
  echo "ARG BUNDLE=tensorfs-mount-s3:$tag"
  echo "FROM \${BUNDLE} AS tensorfs"
  echo "FROM public.ecr.aws/mountpoint-s3-csi-driver/aws-mountpoint-s3-csi-driver:$driver_version"
  echo "COPY --from=tensorfs $bin_dir/ $bin_dir/"
  [[ $bin_dir == /mountpoint-s3/bin ]] || echo "ENV MOUNTPOINT_BIN_DIR=$bin_dir"
} >"$dockerfile"
echo "wrote $out (tag $tag): $(($(stat -c %s "$out") / 1048576)) MiB in $((SECONDS - start)) s, and $dockerfile:"
cat "$dockerfile"

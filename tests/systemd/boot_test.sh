#!/usr/bin/env bash
# boot_test.sh BUILD_DIR
#
# tensorfs under a booted systemd, as a new user meets it: a Debian 12 root
# (debootstrap from the mirror apt uses, made once and kept under
# /var/cache/tensorfs-test/bookworm) is booted with systemd as PID 1 by
# systemd-nspawn -b, with /dev/fuse and /dev/autofs bound in and the host's
# network (the project's GCS test server runs on the host's loopback). The
# package that cpack builds from BUILD_DIR is installed in it with
# `apt install ./tensorfs_*.deb`. Checked, with the fstab lines of docs/CONFIGURATION.md and unit
# steps:
#   - an fstab line mounted at boot reads right (sha256 of every file);
#   - the x-systemd.automount line of docs/CONFIGURATION.md mounts on first access (printed: how long);
#   - tensorfs@.service: enable --now, reads right, stop and start;
#   - the .mount unit of the fstab line: stop and start;
#   - a missing bucket (unit and fstab) ends "failed" without restarts, exit
#     status 4, the reason in `journalctl -p err`;
#   - the server down: the unit gives up after startup_deadline with tensorfs'
#     own reason in `journalctl -p err`, and is restarted (a transient error);
#   - power-off with the mounts up ends cleanly.
# The container runs on an overlay of the cached root: the cache stays clean and
# everything the run made is removed at exit. Exits 77 (skipped) when not root
# or without systemd-nspawn, debootstrap, /dev/fuse or /dev/autofs
# (packaging/install-deps.sh installs the tools).
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: boot_test.sh BUILD_DIR}" && pwd)

skip() {
  echo "skipped: $*"
  exit 77
}
[[ $(id -u) -eq 0 ]] || skip "booting a container needs root"
for tool in systemd-nspawn debootstrap nsenter cpack; do
  command -v "$tool" >/dev/null || skip "$tool is not installed"
done
[[ -c /dev/fuse && -c /dev/autofs ]] || skip "/dev/fuse or /dev/autofs is missing"

cache=${TENSORFS_BOOT_TEST_ROOT:-/var/cache/tensorfs-test/bookworm}
mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
[[ -n $mirror ]] || mirror=$(awk '$1 == "deb" && $3 == "bookworm" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
mirror=${mirror:-http://deb.debian.org/debian}
# What tensorfs' package depends on is included, so that installing it needs no download.
include=systemd,systemd-sysv,dbus,fuse3,libcurl4,libssl3,libspdlog1.10,libfmt9,ca-certificates,procps,util-linux

failures=0
pass() { echo "PASS: $*"; }
failed() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
die() {
  echo "FAIL: $*" >&2
  exit 1
}

mkdir -p "$(dirname "$cache")"
exec 8>"$cache.lock"  # one run at a time per cache (and per machine's /run/systemd/nspawn)
flock -w 900 8 || die "another boot test holds $cache.lock"
if [[ ! -d $cache ]]; then
  echo "== debootstrap bookworm from $mirror into $cache (once; later runs reuse it)"
  rm -rf "$cache.partial"
  if ! debootstrap --variant=minbase --include="$include" bookworm "$cache.partial" "$mirror" >"$cache.log" 2>&1; then
    tail -20 "$cache.log"
    rm -rf "$cache.partial"
    die "debootstrap failed (log: $cache.log)"
  fi
  mv "$cache.partial" "$cache"
fi

work=$(mktemp -d /tmp/tensorfs-boot-test.XXXXXX)
merged=$work/root
marker=etc/tensorfs-boot-test-$$
nspawn_pid=""
server_pid=""
leader=""
nspawn_tmpfs=0
cleanup() {
  set +e
  if [[ -n $nspawn_pid ]] && kill -0 "$nspawn_pid" 2>/dev/null; then
    [[ -n $leader ]] && kill -KILL "$leader" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$nspawn_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$nspawn_pid" 2>/dev/null
    wait "$nspawn_pid" 2>/dev/null
  fi
  [[ -n $server_pid ]] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  mountpoint -q "$merged" && umount -l "$merged"
  [[ $nspawn_tmpfs -eq 1 ]] && umount -l /run/systemd/nspawn
  rm -rf "$work"
}
trap cleanup EXIT

# systemd-nspawn keeps state under /run/systemd/nspawn and refuses to clean it
# up unless it is on a tmpfs (a host without systemd may have /run on disk).
if [[ $(stat -f -c %T /run/systemd/nspawn 2>/dev/null || stat -f -c %T /run) != tmpfs ]]; then
  mkdir -p /run/systemd/nspawn
  mount -t tmpfs -o mode=0755 tmpfs /run/systemd/nspawn
  nspawn_tmpfs=1
fi

echo "== cpack -G DEB"
(cd "$build" && cpack -G DEB -B "$work/pkg" >"$work/cpack.log" 2>&1) || { tail -20 "$work/cpack.log"; die "cpack"; }
debs=("$work"/pkg/tensorfs_*.deb)
[[ -f ${debs[0]} ]] || die "cpack made no tensorfs_*.deb"
echo "built $(basename "${debs[0]}")"

echo "== a checkpoint on the GCS test server"
mkdir -p "$work/gcs/ckpt/llama" "$work/gcs/other"
/usr/bin/python3 - "$work/gcs/ckpt/llama" <<'PY'
import json, os, struct, sys
d = sys.argv[1]
for shard in (1, 2):
    tensors, blob = {}, b""
    for i in range(4):
        data = os.urandom(256 * 1024)
        tensors["model.layers.%d.w%d.weight" % (shard, i)] = {
            "dtype": "BF16", "shape": [512, 256], "data_offsets": [len(blob), len(blob) + len(data)]}
        blob += data
    header = json.dumps(tensors).encode()
    header += b" " * (-len(header) % 8)
    with open(os.path.join(d, "model-%05d-of-00002.safetensors" % shard), "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + blob)
with open(os.path.join(d, "config.json"), "w") as f:
    json.dump({"model_type": "llama"}, f)
PY
(cd "$work/gcs/ckpt/llama" && sha256sum -- * | sort -k2) >"$work/want.sha256"
/usr/bin/python3 "$src/tests/support/gcs_test_server.py" --data "$work/gcs" --port 0 --port-file "$work/port" \
  >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 300); do [[ -s $work/port ]] && break; sleep 0.1; done
[[ -s $work/port ]] || die "the test server did not start: $(cat "$work/server.log")"
endpoint=http://127.0.0.1:$(cat "$work/port")
# A port where nothing listens: the server "down".
down=http://127.0.0.1:$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
gs="anonymous,endpoint=$endpoint"

echo "== the root: an overlay of $cache, the package installed with apt"
mkdir -p "$work/upper" "$work/overlay-work" "$merged"
mount -t overlay overlay -o "lowerdir=$cache,upperdir=$work/upper,workdir=$work/overlay-work" "$merged"
touch "$merged/$marker"
mkdir -p "$merged/root/pkg"
cp "${debs[0]}" "$merged/root/pkg/"
if ! systemd-nspawn -q -D "$merged" --register=no --keep-unit --chdir=/root/pkg \
  sh -c 'apt install -y ./tensorfs_*.deb' >"$work/apt.log" 2>&1; then
  tail -20 "$work/apt.log"
  die "apt install ./tensorfs_*.deb"
fi
pass "apt install ./$(basename "${debs[0]}")"

# the fstab lines of docs/CONFIGURATION.md, pointed at the test server.
cat >>"$merged/etc/fstab" <<FSTAB
gs://ckpt/llama      /mnt/boot     tensorfs  ro,_netdev,nofail,allow_other,$gs  0 0
gs://ckpt/llama      /mnt/auto     tensorfs  ro,_netdev,nofail,x-systemd.automount,allow_other,$gs  0 0
gs://no-such-bucket  /mnt/missing  tensorfs  ro,_netdev,nofail,allow_other,$gs  0 0
FSTAB
mkdir -p "$merged"/mnt/{boot,auto,missing,svc,nobucket,down}
# the unit steps of docs/CONFIGURATION.md: the example configuration, edited.
conf() {  # INSTANCE SOURCE OPTIONS
  sed -e "s|^TENSORFS_SOURCE=.*|TENSORFS_SOURCE=$2|" -e "s|^TENSORFS_OPTIONS=.*|TENSORFS_OPTIONS=$3|" \
    "$merged/usr/share/doc/tensorfs/examples/tensorfs.conf.example" >"$merged/etc/tensorfs/$1.conf"
}
conf mnt-svc gs://ckpt/llama "allow_other,$gs"
conf mnt-nobucket gs://no-such-bucket "allow_other,$gs"
conf mnt-down gs://ckpt/llama "allow_other,anonymous,endpoint=$down,startup_deadline=5"

echo "== boot"
systemd-nspawn -q -b -D "$merged" --register=no --keep-unit --bind=/dev/fuse --bind=/dev/autofs \
  </dev/null >"$work/console.log" 2>&1 &
nspawn_pid=$!
for _ in $(seq 600); do
  for p in $(pgrep -x systemd || true); do
    [[ -e /proc/$p/root/$marker ]] && grep -qE '^NSpid:.*[[:space:]]1$' "/proc/$p/status" && leader=$p
  done
  [[ -n $leader ]] && break
  kill -0 "$nspawn_pid" 2>/dev/null || break
  sleep 0.1
done
[[ -n $leader ]] || die "the container did not boot: $(tail -20 "$work/console.log")"
ct() { nsenter -t "$leader" -a -- env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin SYSTEMD_PAGER= "$@"; }
# PID 1 is found before its bus is up: wait for the bus, then for the boot to end.
# Until PID 1 listens, systemctl prints nothing or "offline" (no manager to ask).
state=""
for _ in $(seq 1200); do
  state=$(ct timeout 120 systemctl is-system-running --wait 2>/dev/null || true)
  [[ -n $state && $state != offline ]] && break
  sleep 0.1
done
[[ $state == running || $state == degraded ]] || die "the boot did not finish: '$state'"
echo "booted: $state ($(ct systemctl --failed --no-legend --plain | awk '{print $1}' | tr '\n' ' '))"

sums() { ct sh -c "cd '$1' && for f in *; do if [ -f \"\$f\" ]; then sha256sum -- \"\$f\"; fi; done | sort -k2"; }
# Where tensorfs' threads wait in the kernel, for a failure message.
stacks() {
  local p t
  for p in $(pgrep -f 'tensorfs' || true); do
    [[ -e /proc/$p/root/$marker ]] || continue
    echo "-- $p $(tr '\0' ' ' <"/proc/$p/cmdline")"
    for t in /proc/"$p"/task/*; do  # threads waiting on their own locks left out
      grep -q futex_wait "$t/stack" 2>/dev/null || echo "   $(cat "$t/comm"): $(tr '\n' ' ' <"$t/stack" 2>/dev/null | cut -c1-300)"
    done
  done
}
same_bytes() {  # DIR WHAT
  if diff <(sums "$1") "$work/want.sha256" >/dev/null; then
    pass "$2: sha256 of every file equals the source"
  else
    failed "$2: files differ from the source: $(sums "$1" 2>&1 | head -5)"
  fi
}
journal_err() { ct journalctl -q --no-pager -p err -u "$1"; }

echo "== fstab line mounted at boot"
if ct findmnt -n -t fuse.tensorfs /mnt/boot >/dev/null; then pass "/mnt/boot mounted at boot"; else failed "/mnt/boot not mounted: $(ct systemctl status mnt-boot.mount 2>&1 | tail -5)"; fi
same_bytes /mnt/boot "fstab mount"
ct systemctl stop mnt-boot.mount && ! ct findmnt -n /mnt/boot >/dev/null && pass "systemctl stop mnt-boot.mount unmounts" ||
  failed "systemctl stop mnt-boot.mount"
ct systemctl start mnt-boot.mount && ct findmnt -n -t fuse.tensorfs /mnt/boot >/dev/null &&
  pass "systemctl start mnt-boot.mount mounts again" || failed "systemctl start mnt-boot.mount"

echo "== the x-systemd.automount line of docs/CONFIGURATION.md, on first access"
start=$(date +%s.%N)
if ct timeout 60 ls /mnt/auto >/dev/null; then
  printf 'PASS: first access of /mnt/auto answered after %.2f s\n' "$(echo "$(date +%s.%N) - $start" | bc)"
else
  failed "first access of /mnt/auto did not answer within 60 s: $(ct journalctl -q --no-pager -u mnt-auto.mount | tail -5)
$(stacks)"
fi
ct findmnt -n -t fuse.tensorfs /mnt/auto >/dev/null && pass "/mnt/auto is a tensorfs mount after the first access" ||
  failed "/mnt/auto not mounted after the first access: $(ct journalctl -q --no-pager -u mnt-auto.mount | tail -5)"
same_bytes /mnt/auto "automount"

echo "== tensorfs@.service"
if ct timeout 120 systemctl enable --now tensorfs@mnt-svc.service; then
  pass "systemctl enable --now tensorfs@mnt-svc.service: $(ct systemctl show -P StatusText tensorfs@mnt-svc.service)"
else
  failed "tensorfs@mnt-svc.service did not start: $(ct journalctl -q --no-pager -u tensorfs@mnt-svc.service | tail -5)"
fi
same_bytes /mnt/svc "unit"
ct systemctl stop tensorfs@mnt-svc.service && ! ct findmnt -n /mnt/svc >/dev/null && pass "stop unmounts" ||
  failed "systemctl stop tensorfs@mnt-svc.service"
ct timeout 120 systemctl start tensorfs@mnt-svc.service && ct findmnt -n -t fuse.tensorfs /mnt/svc >/dev/null &&
  pass "start mounts again" || failed "systemctl start tensorfs@mnt-svc.service"

echo "== a missing bucket ends failed, without restarts"
ct timeout 120 systemctl start tensorfs@mnt-nobucket.service && failed "a missing bucket started"
for _ in $(seq 600); do
  [[ $(ct systemctl show -P ActiveState tensorfs@mnt-nobucket.service) == failed ]] && break
  sleep 0.1
done
sleep 6  # longer than RestartSec: a restart would show now
show=$(ct systemctl show -p ActiveState -p NRestarts -p ExecMainStatus tensorfs@mnt-nobucket.service | tr '\n' ' ')
[[ $show == *ActiveState=failed* && $show == *NRestarts=0* && $show == *ExecMainStatus=4* ]] &&
  pass "tensorfs@mnt-nobucket.service: $show" || failed "tensorfs@mnt-nobucket.service: $show"
journal_err tensorfs@mnt-nobucket.service | grep -q "no-such-bucket not found" &&
  pass "journalctl -p err -u tensorfs@mnt-nobucket.service: $(journal_err tensorfs@mnt-nobucket.service | grep "not found" | tail -1)" ||
  failed "no reason at err priority: $(ct journalctl -q --no-pager -u tensorfs@mnt-nobucket.service | tail -5)"
[[ $(ct systemctl show -P ActiveState mnt-missing.mount) == failed ]] && pass "fstab mnt-missing.mount failed" ||
  failed "mnt-missing.mount: $(ct systemctl show -P ActiveState mnt-missing.mount)"
journal_err mnt-missing.mount | grep -q "no-such-bucket not found" &&
  pass "journalctl -p err -u mnt-missing.mount: $(journal_err mnt-missing.mount | grep "not found" | tail -1)" ||
  failed "fstab: no reason at err priority: $(ct journalctl -q --no-pager -u mnt-missing.mount | tail -5)"

echo "== the server down: tensorfs' own reason at err, and a restart"
ct timeout 120 systemctl start tensorfs@mnt-down.service && failed "started with the server down"
journal_err tensorfs@mnt-down.service | grep -q "tensorfs.*gave up after" &&
  pass "journalctl -p err -u tensorfs@mnt-down.service: $(journal_err tensorfs@mnt-down.service | grep "gave up" | tail -1)" ||
  failed "no 'gave up' at err priority: $(ct journalctl -q --no-pager -u tensorfs@mnt-down.service | tail -5)"
sleep 6  # RestartSec
restarts=$(ct systemctl show -P NRestarts tensorfs@mnt-down.service)
[[ $restarts -ge 1 ]] && pass "a transient failure is restarted (NRestarts=$restarts)" ||
  failed "not restarted: NRestarts=$restarts"
ct systemctl stop tensorfs@mnt-down.service

echo "== power-off with the mounts up"
ct findmnt -n -t fuse.tensorfs -o TARGET | tr '\n' ' '
echo
start=$(date +%s.%N)
ct systemctl poweroff || true
rc=0
for _ in $(seq 1200); do kill -0 "$nspawn_pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$nspawn_pid" 2>/dev/null; then
  failed "the container still runs 120 s after poweroff"
else
  wait "$nspawn_pid" || rc=$?
  nspawn_pid=""
  if [[ $rc -eq 0 ]] && ! grep -qi "failed unmounting\|timed out" "$work/console.log"; then
    printf 'PASS: powered off in %.1f s with the mounts up\n' "$(echo "$(date +%s.%N) - $start" | bc)"
  else
    failed "power-off: nspawn exit $rc; $(grep -i "failed\|timed out" "$work/console.log" | tail -5)"
  fi
fi

if [[ $failures -ne 0 ]]; then
  echo "== console"
  tail -40 "$work/console.log"
  die "$failures check(s) failed"
fi
echo "all checks passed"

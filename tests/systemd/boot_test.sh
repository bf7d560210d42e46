#!/usr/bin/env bash
# boot_test.sh DEB|DIR [ROOT]
#
# tensorfs under a booted systemd, as a new user meets it: a Debian 12 root
# (ROOT, made by packaging/make-test-root.sh if missing; default
# $TENSORFS_TEST_ROOT) is booted with systemd as PID 1 by systemd-nspawn -b,
# with /dev/fuse (and /dev/autofs, where the kernel has autofs) bound in and the
# test's network (the project's GCS test server runs on its loopback). The package DEB (built once per run by
# cpack, the ctest fixture "deb") is installed in it with
# `apt install ./tensorfs_*.deb`. Checked, with the fstab lines and unit
# steps:
#   - an fstab line mounted at boot reads right (sha256 of every file);
#   - the x-systemd.automount line mounts on first access (printed: how long);
#     on a kernel without autofs (CONFIG_AUTOFS_FS) this case is not run, and
#     the test prints one "NOT RUN:" line for the suite's summary; the
#     automount unit then fails as docs/TROUBLESHOOTING.md says, which is
#     checked, and nothing else of the boot is affected;
#   - tensorfs@.service: enable --now, reads right, the hardening in force in
#     the running service (its capability bounding set, seccomp filter and
#     no_new_privs, as /proc shows them; RestartPreventExitStatus=), stop (exit
#     status 0) and start;
#   - the .mount unit of the fstab line: stop and start;
#   - a missing bucket (unit and fstab) ends "failed" without restarts, exit
#     status 4, the reason in `journalctl -p err`;
#   - the server down: the unit gives up after startup_deadline with tensorfs'
#     own reason in `journalctl -p err`, and is restarted (a transient error);
#   - the package itself, inside the booted system (tests/packaging/
#     deb_package_test.sh): its files and dependencies, daemon-reload on
#     removal and on installation, `mount -t tensorfs`, nothing left after purge;
#   - power-off with the mounts up ends cleanly.
# The container runs on an overlay of ROOT (on a kernel without overlayfs, a
# copy of it): ROOT stays clean, and everything the run made is removed at exit. The host is not changed: run under the test
# sandbox (ctest), the mounts and /run/systemd/nspawn are the test's own.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
deb=${1:?usage: boot_test.sh DEB|DIR [ROOT]}
if [[ -d $deb ]]; then  # the directory the "deb" fixture built the package in
  debs=("$deb"/tensorfs_*.deb)
  [[ ${#debs[@]} -eq 1 && -f ${debs[0]} ]] || { echo "FAIL: expected one tensorfs_*.deb in $deb: ${debs[*]}" >&2; exit 1; }
  deb=${debs[0]}
fi
deb=$(realpath "$deb")
cache=${2:-${TENSORFS_TEST_ROOT:?usage: boot_test.sh DEB ROOT (or TENSORFS_TEST_ROOT)}}

die() {
  echo "FAIL: $*" >&2
  exit 1
}
[[ $(id -u) -eq 0 ]] || die "booting a container needs root"
for tool in systemd-nspawn nsenter; do
  command -v "$tool" >/dev/null || die "$tool is not installed (packaging/install-deps.sh)"
done
[[ -c /dev/fuse ]] || die "/dev/fuse is missing"
# Kernel features that some cases need (a module is loaded first, if it is one).
has_fs() {  # FSTYPE MODULE
  grep -qw "$1" /proc/filesystems || { modprobe -q "$2" 2>/dev/null && grep -qw "$1" /proc/filesystems; }
}
autofs=1
if ! has_fs autofs autofs4 || [[ ! -c /dev/autofs ]]; then
  autofs=0
  echo "NOT RUN: boot_test: the x-systemd.automount case: needs CONFIG_AUTOFS_FS" \
    "($(grep -qw autofs /proc/filesystems && echo "no /dev/autofs" || echo "no autofs in /proc/filesystems"))"
fi
overlay=1
has_fs overlay overlay || overlay=0
seccomp=1  # SystemCallFilter= is in force only where the kernel has seccomp filters
if [[ ! -e /proc/sys/kernel/seccomp/actions_avail ]]; then
  seccomp=0
  echo "NOT RUN: boot_test: the unit's SystemCallFilter check: needs CONFIG_SECCOMP_FILTER" \
    "(no /proc/sys/kernel/seccomp/actions_avail)"
fi
[[ -f $deb ]] || die "no package $deb"
bash "$src/packaging/make-test-root.sh" "$cache"  # waits for a build in progress

failures=0
pass() { echo "PASS: $*"; }
failed() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
# Polls COMMAND... every 0.1 s until it succeeds; fails the test, naming WHAT,
# after 120 s (which only a hang takes).
wait_for() {  # WHAT COMMAND...
  local what=$1
  shift
  for _ in $(seq 1200); do
    "$@" && return 0
    sleep 0.1
  done
  failed "timed out after 120 s waiting for $what"
  return 1
}

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

debs=("$deb")

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

echo "== the root: $( ((overlay)) && echo "an overlay" || echo "a copy") of $cache, the package installed with apt"
mkdir -p "$work/upper" "$work/overlay-work" "$merged"
if ((overlay)); then
  mount -t overlay overlay -o "lowerdir=$cache,upperdir=$work/upper,workdir=$work/overlay-work" "$merged"
else  # no overlayfs (CONFIG_OVERLAY_FS) in this kernel: a copy does the same
  mount -t tmpfs -o mode=0755 tmpfs "$merged" 2>/dev/null || true
  cp -a "$cache/." "$merged/"
fi
touch "$merged/$marker"
mkdir -p "$merged/root/pkg"
cp "${debs[0]}" "$src/tests/packaging/deb_package_test.sh" "$merged/root/pkg/"
if ! systemd-nspawn -q -D "$merged" --register=no --keep-unit --chdir=/root/pkg \
  sh -c 'apt install -y ./tensorfs_*.deb' >"$work/apt.log" 2>&1; then
  tail -20 "$work/apt.log"
  die "apt install ./tensorfs_*.deb"
fi
pass "apt install ./$(basename "${debs[0]}")"

# The fstab lines of docs/CONFIGURATION.md, pointed at the test server.
cat >>"$merged/etc/fstab" <<FSTAB
gs://ckpt/llama      /mnt/boot     tensorfs  ro,_netdev,nofail,allow_other,$gs  0 0
gs://ckpt/llama      /mnt/auto     tensorfs  ro,_netdev,nofail,x-systemd.automount,allow_other,$gs  0 0
gs://no-such-bucket  /mnt/missing  tensorfs  ro,_netdev,nofail,allow_other,$gs  0 0
FSTAB
mkdir -p "$merged"/mnt/{boot,auto,missing,svc,nobucket,down}
# The unit steps of docs/CONFIGURATION.md: the example configuration, edited.
conf() {  # INSTANCE SOURCE OPTIONS
  sed -e "s|^TENSORFS_SOURCE=.*|TENSORFS_SOURCE=$2|" -e "s|^TENSORFS_OPTIONS=.*|TENSORFS_OPTIONS=$3|" \
    "$merged/usr/share/doc/tensorfs/examples/tensorfs.conf.example" >"$merged/etc/tensorfs/$1.conf"
}
conf mnt-svc gs://ckpt/llama "allow_other,$gs"
conf mnt-nobucket gs://no-such-bucket "allow_other,$gs"
conf mnt-down gs://ckpt/llama "allow_other,anonymous,endpoint=$down,startup_deadline=5"

echo "== boot"
binds=(--bind=/dev/fuse)
((autofs)) && binds+=(--bind=/dev/autofs)
systemd-nspawn -q -b -D "$merged" --register=no --keep-unit "${binds[@]}" \
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
    failed "$2: files differ from the source: $(sums "$1" 2>&1 | sed -n 1,5p)"
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

if ((autofs)); then
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
else
# What docs/TROUBLESHOOTING.md tells a user of this line on such a kernel.
echo "== the x-systemd.automount line on a kernel without autofs, as docs/TROUBLESHOOTING.md says"
grep -q "Starting of mnt-auto.automount unsupported" <<<"$(ct journalctl -q --no-pager -u mnt-auto.automount)" &&
  pass "journalctl -u mnt-auto.automount: $(ct journalctl -q --no-pager -u mnt-auto.automount | tail -1)" ||
  failed "no 'unsupported' in the automount's journal: $(ct journalctl -q --no-pager -u mnt-auto.automount | tail -5)"
if out=$(ct systemctl start mnt-auto.automount 2>&1); then
  failed "systemctl start mnt-auto.automount succeeded without autofs"
else
  pass "systemctl start mnt-auto.automount: $out"
fi
ct ls /mnt/auto >/dev/null && ! ct findmnt -n /mnt/auto >/dev/null &&
  pass "/mnt/auto stays an empty directory of the root" || failed "/mnt/auto: $(ct findmnt -n /mnt/auto)"
fi

echo "== tensorfs@.service"
if ct timeout 120 systemctl enable --now tensorfs@mnt-svc.service; then
  pass "systemctl enable --now tensorfs@mnt-svc.service: $(ct systemctl show -P StatusText tensorfs@mnt-svc.service)"
else
  failed "tensorfs@mnt-svc.service did not start: $(ct journalctl -q --no-pager -u tensorfs@mnt-svc.service | tail -5)"
fi
same_bytes /mnt/svc "unit"
# The unit's hardening, as the kernel applies it to the running service.
main_pid=$(ct systemctl show -P MainPID tensorfs@mnt-svc.service)
status=$(ct cat "/proc/$main_pid/status")
capbnd=$(awk '/^CapBnd:/ {print $2}' <<<"$status")
# CAP_SYS_ADMIN (21) and CAP_DAC_READ_SEARCH (2): nothing else.
[[ $((16#$capbnd)) -eq $(((1 << 21) | (1 << 2))) ]] && pass "CapabilityBoundingSet in force: CapBnd $capbnd" ||
  failed "CapBnd of the running service is $capbnd, not CAP_SYS_ADMIN CAP_DAC_READ_SEARCH"
if ((seccomp)); then
  [[ $(awk '/^Seccomp:/ {print $2}' <<<"$status") == 2 ]] && pass "SystemCallFilter in force: a seccomp filter" ||
    failed "no seccomp filter on the running service: $(grep -E '^Seccomp' <<<"$status")"
fi
[[ $(awk '/^NoNewPrivs:/ {print $2}' <<<"$status") == 1 ]] && pass "NoNewPrivileges in force" ||
  failed "no_new_privs is not set on the running service"
prevent=$(ct systemctl show -P RestartPreventExitStatus tensorfs@mnt-svc.service)
[[ $prevent == "2 3 4 5" ]] && pass "RestartPreventExitStatus=$prevent" || failed "RestartPreventExitStatus=$prevent"
ct systemctl stop tensorfs@mnt-svc.service && ! ct findmnt -n /mnt/svc >/dev/null && pass "stop unmounts" ||
  failed "systemctl stop tensorfs@mnt-svc.service"
show=$(ct systemctl show -p Result -p ExecMainCode -p ExecMainStatus tensorfs@mnt-svc.service | tr '\n' ' ')
[[ $show == *Result=success* && $show == *ExecMainCode=1* && $show == *ExecMainStatus=0* ]] &&
  pass "stopped with SIGTERM, tensorfs exited 0: $show" || failed "after stop: $show"
ct timeout 120 systemctl start tensorfs@mnt-svc.service && ct findmnt -n -t fuse.tensorfs /mnt/svc >/dev/null &&
  pass "start mounts again" || failed "systemctl start tensorfs@mnt-svc.service"

echo "== a missing bucket ends failed, without restarts"
ct timeout 120 systemctl start tensorfs@mnt-nobucket.service && failed "a missing bucket started"
# "failed" is final: a restart to come would show as activating (auto-restart)
# for RestartSec, never as failed.
unit_failed() { [[ $(ct systemctl show -P ActiveState "$1") == failed ]]; }
wait_for "tensorfs@mnt-nobucket.service to end failed" unit_failed tensorfs@mnt-nobucket.service || true
show=$(ct systemctl show -p ActiveState -p SubState -p NRestarts -p ExecMainStatus tensorfs@mnt-nobucket.service | tr '\n' ' ')
[[ $show == *ActiveState=failed* && $show == *NRestarts=0* && $show == *ExecMainStatus=4* ]] &&
  pass "tensorfs@mnt-nobucket.service: $show" || failed "tensorfs@mnt-nobucket.service: $show"
grep -q "no-such-bucket not found" <<<"$(journal_err tensorfs@mnt-nobucket.service)" &&
  pass "journalctl -p err -u tensorfs@mnt-nobucket.service: $(journal_err tensorfs@mnt-nobucket.service | grep "not found" | tail -1)" ||
  failed "no reason at err priority: $(ct journalctl -q --no-pager -u tensorfs@mnt-nobucket.service | tail -5)"
[[ $(ct systemctl show -P ActiveState mnt-missing.mount) == failed ]] && pass "fstab mnt-missing.mount failed" ||
  failed "mnt-missing.mount: $(ct systemctl show -P ActiveState mnt-missing.mount)"
grep -q "no-such-bucket not found" <<<"$(journal_err mnt-missing.mount)" &&
  pass "journalctl -p err -u mnt-missing.mount: $(journal_err mnt-missing.mount | grep "not found" | tail -1)" ||
  failed "fstab: no reason at err priority: $(ct journalctl -q --no-pager -u mnt-missing.mount | tail -5)"

echo "== the server down: tensorfs' own reason at err, and a restart"
ct timeout 120 systemctl start tensorfs@mnt-down.service && failed "started with the server down"
grep -q "tensorfs.*gave up after" <<<"$(journal_err tensorfs@mnt-down.service)" &&
  pass "journalctl -p err -u tensorfs@mnt-down.service: $(journal_err tensorfs@mnt-down.service | grep "gave up" | tail -1)" ||
  failed "no 'gave up' at err priority: $(ct journalctl -q --no-pager -u tensorfs@mnt-down.service | tail -5)"
restarted() { [[ $(ct systemctl show -P NRestarts tensorfs@mnt-down.service) -ge 1 ]]; }
wait_for "tensorfs@mnt-down.service to be restarted" restarted &&
  pass "a transient failure is restarted (NRestarts=$(ct systemctl show -P NRestarts tensorfs@mnt-down.service))"
ct systemctl stop tensorfs@mnt-down.service

echo "== the package in the booted system"
# The units and mounts that run the installed binary stop first.
ct systemctl stop mnt-boot.mount mnt-auto.automount mnt-auto.mount tensorfs@mnt-svc.service >/dev/null 2>&1 || true
if ct sh /root/pkg/deb_package_test.sh "/root/pkg/$(basename "${debs[0]}")"; then
  pass "deb_package_test.sh in the booted system"
else
  failed "deb_package_test.sh in the booted system"
fi
ct systemctl start mnt-boot.mount tensorfs@mnt-svc.service >/dev/null 2>&1 || true

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

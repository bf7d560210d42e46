#!/usr/bin/env bash
# systemd_unit_test.sh SOURCE_DIR TENSORFS_BINARY
#
# Checks packaging/systemd/tensorfs@.service without booting (the booted test,
# tests/systemd/boot_test.sh, checks what is in force in a running system):
#  - systemd-analyze verify reports nothing, for an instance (tensorfs@mnt-models);
#    verify insists that ExecStart's binary exists, so the copy it checks runs
#    the built binary instead of /usr/bin/tensorfs (the only change made);
#  - no setting gives the service its own mount namespace, which would hide the
#    mount from everyone else (a lint: such a setting is easy to add by mistake);
#  - the ExecStart line expands to a command line tensorfs accepts;
#  - (as root) ExecStopPost's script detaches a mount left dead by a killed
#    tensorfs, and leaves a live mount and a plain directory alone.
set -euo pipefail
src=$1
binary=$2
unit=$src/packaging/systemd/tensorfs@.service
if ! command -v systemd-analyze >/dev/null; then
  echo "systemd-analyze not found (apt-get install systemd)" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'if mountpoint -q "$work/mnt" 2>/dev/null; then umount -l "$work/mnt"; fi; rm -rf "$work"' EXIT

fail=0
check() {  # DESCRIPTION COMMAND...
  local what=$1
  shift
  if ! "$@"; then
    echo "FAIL: $what" >&2
    fail=1
  fi
}

grep -q '^ExecStart=/usr/bin/tensorfs ' "$unit" || { echo "FAIL: ExecStart does not run /usr/bin/tensorfs" >&2; exit 1; }
sed "s#^ExecStart=/usr/bin/tensorfs #ExecStart=$binary #" "$unit" >"$work/tensorfs@.service"
ln -s tensorfs@.service "$work/tensorfs@mnt-models.service"
out=$(systemd-analyze verify --man=no "$work/tensorfs@mnt-models.service" 2>&1) || { echo "$out" >&2; exit 1; }
if [[ -n "$out" ]]; then
  echo "FAIL: systemd-analyze verify has complaints:" >&2
  echo "$out" >&2
  fail=1
fi

# Settings that imply a private mount namespace (systemd.exec(5), PrivateMounts=),
# a user namespace, or a UTS namespace.
for key in PrivateTmp PrivateDevices PrivateMounts PrivateUsers PrivateIPC PrivateNetwork ProtectSystem \
  ProtectHome ProtectKernelTunables ProtectKernelModules ProtectKernelLogs ProtectControlGroups ProtectClock \
  ProtectHostname ProtectProc ProcSubset ReadOnlyPaths ReadWritePaths InaccessiblePaths ExecPaths NoExecPaths \
  TemporaryFileSystem BindPaths BindReadOnlyPaths RootDirectory RootImage MountFlags MountAPIVFS \
  NetworkNamespacePath LogNamespace DynamicUser; do
  if grep -Eq "^[[:space:]]*$key=" "$unit"; then
    echo "FAIL: $key= would hide the mount in the service's own namespace" >&2
    fail=1
  fi
done

# The ExecStart line expands to a command line tensorfs accepts: the options as
# the service would pass them, with and without TENSORFS_OPTIONS.
for opts in "" "allow_other,log_level=debug"; do
  out=$("$binary" "$work" /nonexistent-mnt -f -o "ro,$opts" 2>&1 || true)
  if ! grep -q 'mkdir -p /nonexistent-mnt' <<<"$out"; then
    echo "FAIL: tensorfs SRC DIR -f -o ro,$opts did not get as far as checking the mount point: $out" >&2
    fail=1
  fi
done

# ExecStopPost, run as systemd would after the service stopped: it detaches a
# dead tensorfs mount and leaves a live one, or a plain directory, alone.
if [[ $(id -u) -eq 0 && -c /dev/fuse ]]; then
  cleanup_script=$(sed -n "s/^ExecStopPost=-\/bin\/sh -c '\(.*\)' tensorfs-cleanup %f\$/\1/p" "$unit")
  [[ -n $cleanup_script ]] || { echo "FAIL: cannot find ExecStopPost's script" >&2; exit 1; }
  stop_post() { /bin/sh -c "$cleanup_script" tensorfs-cleanup "$1"; }
  mkdir -p "$work/src" "$work/mnt"
  echo hello >"$work/src/f.txt"

  stop_post "$work/mnt" || { echo "FAIL: ExecStopPost on a plain directory" >&2; fail=1; }

  "$binary" "$work/src" "$work/mnt" || { echo "FAIL: cannot mount" >&2; exit 1; }
  stop_post "$work/mnt"
  check "ExecStopPost leaves a live mount alone" mountpoint -q "$work/mnt"
  check "the live mount still reads" grep -qx hello "$work/mnt/f.txt"
  fusermount3 -u "$work/mnt"

  "$binary" "$work/src" "$work/mnt" -f 2>"$work/log" &
  pid=$!
  for i in $(seq 1201); do  # 120 s only catch a hang
    mountpoint -q "$work/mnt" && break
    [[ $i -le 1200 ]] || { echo "FAIL: not mounted after 120 s: $(cat "$work/log")" >&2; exit 1; }
    sleep 0.1
  done
  grep -qx hello "$work/mnt/f.txt" || { echo "FAIL: the mount does not read: $(cat "$work/log")" >&2; exit 1; }
  kill -KILL $pid
  wait $pid 2>/dev/null || true
  if stat -f "$work/mnt" >/dev/null 2>&1; then
    echo "FAIL: SIGKILL did not leave a dead mount to clean up" >&2
    fail=1
  fi
  stop_post "$work/mnt"
  if mountpoint -q "$work/mnt"; then
    echo "FAIL: ExecStopPost left the dead mount behind" >&2
    umount -l "$work/mnt"
    fail=1
  fi
fi

exit $fail

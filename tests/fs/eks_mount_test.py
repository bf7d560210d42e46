#!/usr/bin/python3
"""tensorfs as the mount-s3 of the Mountpoint for Amazon S3 CSI driver v2, with
test doubles of the driver's side written from its source: the node plugin
(tests/support/s3_csi_driver.py) mounts /dev/fuse on the volume's source,
sends the Mountpoint Pod the arguments and environment the driver builds with
the descriptor, waits for readiness with statx and bind-mounts the workload's
target; the Mountpoint Pod runs aws-s3-csi-mounter's double
(tests/support/aws_s3_csi_mounter.py) as uid 1000 (group 1000, the pod's
fsGroup) without any capability in a mount namespace without /dev/fuse, which
runs the bundle's mount-s3 (packaging/build-eks-image.sh --bundle-only) with
fd 3 and exactly the message's environment. The bucket is the S3 dialect of
the GCS test server, SigV4 checked (--require-auth), which also answers STS,
container credentials and instance metadata. What a user would check: an
mmap loader's tensors through the volume equal the source, what stat reports
and the kernel enforces, `tensorfs stats`, which credentials signed the
requests, mount.err and the exit statuses.

  TENSORFS_BINARY=build/dev/fs/tensorfs TENSORFS_BUILD_DIR=build/dev \\
  TENSORFS_TESTDATA=build/dev/tests/support/tensorfs-testdata \\
      tests/fs/eks_mount_test.py [-k NAME]

Every wait has a 60 s limit that only catches hangs; nothing asserts on time.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.realpath(os.path.join(HERE, "..", ".."))
SUPPORT = os.path.join(SRC, "tests", "support")
TENSORFS = os.path.abspath(os.environ["TENSORFS_BINARY"]) if os.environ.get("TENSORFS_BINARY") else ""
BUILD_DIR = os.environ.get("TENSORFS_BUILD_DIR", "")
TESTDATA = os.environ.get("TENSORFS_TESTDATA", "")

sys.path.insert(0, SUPPORT)
from container import HANG_GUARD_S, Output, start_gcs_server, wait_until  # noqa: E402
from daemon_check import run_tests, sandbox_dir  # noqa: E402
from s3_csi_driver import (PublishError, S3CsiNodePlugin, long_term_profile, user_agent,  # noqa: E402
                           write_credential_file)

BUCKET = "models"
MODEL = "llama"
KEY1, SECRET1 = "AKIAFIRSTTESTKEY01", "first-secret"
KEY2, SECRET2 = "AKIASECONDTESTKEY2", "second-secret"
ROLE_ARN = "arn:aws:iam::123456789012:role/model-reader"
POD_UID = 1000  # the Mountpoint Pod's user and fsGroup
# The Mountpoint Pod's container: uid 1000, gid 0 (the driver sets no runAsGroup), the
# fsGroup as a supplementary group, no capability, no way to gain one.
POD_USER = ["setpriv", "--reuid=%d" % POD_UID, "--regid=0", "--groups=%d" % POD_UID, "--inh-caps=-all",
            "--bounding-set=-all", "--no-new-privs"]
# Its mount namespace: a /dev of its own with the usual nodes and no fuse.
POD_NAMESPACE = ("set -e; mount -t tmpfs -o mode=755 tmpfs /dev; mknod -m 666 /dev/null c 1 3; "
                 "mknod -m 666 /dev/zero c 1 5; mknod -m 666 /dev/random c 1 8; mknod -m 666 /dev/urandom c 1 9; "
                 "ln -s /proc/self/fd /dev/fd; test ! -e /dev/fuse; exec \"$@\"")


def control(endpoint, path, payload=None):
    data = json.dumps(payload).encode() if payload is not None else None
    req = urllib.request.Request(endpoint + path, data=data, method="POST" if data is not None else "GET")
    with urllib.request.urlopen(req, timeout=HANG_GUARD_S) as r:
        return json.loads(r.read())


class EksMountTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="tensorfs_eks.")
        os.chmod(cls.work, 0o755)
        cls.model = os.path.join(cls.work, "data", BUCKET, MODEL)
        subprocess.run([TESTDATA, "--arch", "llama", "--size-mib", "8", "--shards", "2", "--out", cls.model],
                       check=True, capture_output=True, timeout=HANG_GUARD_S)
        cls.reports = os.path.join(cls.work, "sanitizer-reports")
        os.mkdir(cls.reports)
        os.chmod(cls.reports, 0o1777)
        cls.bin_dir = os.path.join(cls.work, "mountpoint-s3", "bin")
        r = subprocess.run(["bash", os.path.join(SRC, "packaging", "build-eks-image.sh"), BUILD_DIR, "--bundle-only",
                            cls.bin_dir], capture_output=True, text=True, timeout=HANG_GUARD_S * 5)
        if r.returncode != 0:
            raise AssertionError("build-eks-image.sh --bundle-only: %s%s" % (r.stdout, r.stderr))
        os.chmod(os.path.dirname(cls.bin_dir), 0o755)
        # The mounter's double runs as the pod's user, who may not be able to
        # read the source tree (a clone in a directory of mode 0700): a copy.
        cls.pod_support = os.path.join(cls.work, "pod-support")
        os.mkdir(cls.pod_support)
        for script in ("aws_s3_csi_mounter.py", "s3_csi_driver.py"):
            shutil.copy(os.path.join(SUPPORT, script), cls.pod_support)
        os.chmod(cls.pod_support, 0o755)
        cls.server, cls.endpoint = start_gcs_server(
            os.path.join(cls.work, "data"), cls.work,
            ["--require-auth", "--s3-key", "%s:%s" % (KEY1, SECRET1), "--s3-key", "%s:%s" % (KEY2, SECRET2),
             "--sts-role-arn", ROLE_ARN])

    @classmethod
    def tearDownClass(cls):
        cls.server.terminate()
        cls.server.wait(HANG_GUARD_S)
        for report in os.listdir(cls.reports) if sandbox_dir() else []:  # where the sandbox finds them
            shutil.move(os.path.join(cls.reports, report), os.path.join(sandbox_dir(), report))
        shutil.rmtree(cls.work, ignore_errors=True)

    def setUp(self):
        control(self.endpoint, "/_control/s3/config",
                {"web_identity_tokens": [], "container_token": None, "session_lifetime": 3600})
        control(self.endpoint, "/_control/stats/reset", {})
        self.node = tempfile.mkdtemp(prefix="node.", dir=self.work)
        os.chmod(self.node, 0o755)
        self.plugin = S3CsiNodePlugin(os.path.join(self.node, "kubelet"))
        # The Mountpoint Pod's emptyDir comm, as kubelet makes it for fsGroup 1000.
        self.comm = os.path.join(self.node, "comm")
        os.mkdir(self.comm)
        os.chown(self.comm, 0, POD_UID)
        os.chmod(self.comm, 0o2770)
        self.pod = None
        self.start_pod()

    def tearDown(self):
        self.plugin.unpublish_all()
        if self.pod.poll() is None:
            try:
                self.pod.wait(HANG_GUARD_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.pod.pid, signal.SIGKILL)  # the pod's processes, mount-s3 with them
                self.pod.wait(HANG_GUARD_S)
        self.pod_stdout.wait()  # at their end: every process of the pod is gone
        self.pod_stderr.wait()
        self.pod.stdout.close()
        self.pod.stderr.close()
        shutil.rmtree(self.node, ignore_errors=True)

    def start_pod(self):
        """The Mountpoint Pod, started (as the driver's controller does) before the volume is published."""
        mounter = ["/usr/bin/python3", os.path.join(self.pod_support, "aws_s3_csi_mounter.py"), "--comm", self.comm,
                   "--local-cache", os.path.join(self.node, "local-cache")]
        argv = (["unshare", "-m", "--propagation", "private", "sh", "-c", POD_NAMESPACE, "sh"] + POD_USER +
                ["env", "-i", "MOUNTPOINT_BIN_DIR=" + self.bin_dir] + mounter)
        self.pod = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/", text=True,
                                    errors="replace", start_new_session=True)
        self.pod_stdout = Output(self.pod.stdout)
        self.pod_stderr = Output(self.pod.stderr)
        # Running, in a namespace of its own, before the node plugin mounts: the namespace
        # holds none of the node's mounts (which would keep a volume's connection alive
        # after the node plugin unmounts it).
        wait_until(lambda: os.path.exists(os.path.join(self.comm, "mount.sock")), "the Mountpoint Pod to listen",
                   self.pod)

    def logs(self):
        return "Mountpoint Pod stdout:\n%s\nstderr:\n%s" % (self.pod_stdout.text, self.pod_stderr.text)

    def mount_s3_stderr(self):
        """What mount-s3 wrote on stderr (the mounter copies it there, among its own lines)."""
        lines = self.pod_stderr.text.splitlines()
        return [line for line in lines if not line.startswith("aws-s3-csi-mounter: ")]

    def options(self, *more):
        """The volume's mountOptions, as a PersistentVolume author writes them."""
        return ["prefix %s/" % MODEL, "region us-east-1", "endpoint-url " + self.endpoint, *more]

    def profile_env(self, key=KEY1, secret=SECRET1):
        """Driver-level long-term credentials (a Kubernetes secret): a profile in files under /comm."""
        return long_term_profile(self.comm, "pod-1234-models-pv-", key, secret)

    @classmethod
    def sanitizer_env(cls):
        """What a sanitizer build's mount-s3 needs besides the driver's environment: the
        sandbox's options, its reports written where uid 1000 may write (moved into the
        sandbox's directory, where it looks for them, at the end), and LeakSanitizer told that
        the loader's own allocations are no leak: started through the bundle's ld.so, the
        process has no AT_BASE by which LeakSanitizer knows the loader."""
        env = {}
        for name in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"):
            value = os.environ.get(name, "")
            if not value:
                continue
            items = [item for item in value.split(":") if item and not item.startswith("log_path=")]
            if name != "LSAN_OPTIONS" and sandbox_dir():
                items.append("log_path=" + os.path.join(cls.reports, "sanitizer"))
            env[name] = ":".join(items)
        if "ASAN_OPTIONS" in env:
            suppressions = os.path.join(cls.work, "lsan.supp")
            with open(suppressions, "w") as f:
                f.write("leak:_dl_map_object_deps\nleak:_dl_new_object\nleak:dl_open_worker_begin\n")
            os.chmod(suppressions, 0o644)
            env["LSAN_OPTIONS"] = ":".join(filter(None, [env.get("LSAN_OPTIONS"), "suppressions=" + suppressions,
                                                          "print_suppressions=0"]))
        return env

    def publish(self, options=None, env=None, bucket=BUCKET, **kwargs):
        env = self.profile_env() if env is None else env
        env.update(self.sanitizer_env())
        try:
            return self.plugin.publish("models-pv", bucket, self.comm, self.options() if options is None else options,
                                       env, **kwargs)
        except PublishError as e:
            raise AssertionError("%s\n%s" % (e, self.logs())) from None

    def publish_failing(self, options=None, env=None, bucket=BUCKET):
        """A publish that must fail: the node plugin's error, once the Mountpoint Pod has ended."""
        env = self.profile_env() if env is None else env
        env.update(self.sanitizer_env())
        with self.assertRaises(PublishError) as raised:
            self.plugin.publish("models-pv", bucket, self.comm, self.options() if options is None else options, env)
        self.pod.wait(HANG_GUARD_S)
        return str(raised.exception)

    def stop(self):
        """Unpublish: mount.exit, then the unmount; mount-s3 and the Mountpoint Pod end with 0."""
        self.plugin.unpublish_all()
        try:
            self.pod.wait(HANG_GUARD_S)
        except subprocess.TimeoutExpired:
            self.fail("HANG: the Mountpoint Pod still runs %d s after the unmount\n%s" % (HANG_GUARD_S, self.logs()))
        self.assertEqual(self.pod.returncode, 0, self.logs())
        self.assertIn("Mountpoint exited with 0 exit code", self.pod_stderr.wait(), self.logs())

    def stats(self):
        return control(self.endpoint, "/_control/stats")

    def mmap_loader(self, mounted):
        r = subprocess.run([sys.executable, os.path.join(SUPPORT, "mmap_loader.py"), mounted, "--compare", self.model],
                           capture_output=True, text=True, timeout=HANG_GUARD_S * 5)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr + self.logs())

    def as_user(self, uid, gid, path):
        """`cat PATH` as uid:gid with no other group: (exit status, stderr)."""
        r = subprocess.run(["setpriv", "--reuid=%d" % uid, "--regid=%d" % gid, "--clear-groups", "cat", path],
                           capture_output=True, text=True, timeout=HANG_GUARD_S)
        return r.returncode, r.stderr

    def list_again(self, target):
        """Makes the mount list `target` again: with --metadata-ttl minimal a name not found is
        looked for anew at every lookup (negative_ttl 0)."""
        self.lookups = getattr(self, "lookups", 0) + 1
        self.assertFalse(os.path.exists(os.path.join(target, "absent-%d" % self.lookups)))

    def signers_after_a_listing(self, target):
        """The access keys that signed the requests of a fresh listing of `target` (a lookup
        may share a listing already in flight: look again until one is sent)."""
        control(self.endpoint, "/_control/stats/reset", {})

        def listed():
            self.list_again(target)
            return self.stats()["s3_signers"]
        wait_until(listed, "a listing of %s" % target, self.pod)
        return self.stats()["s3_signers"]

    def test_an_mmap_loader_reads_the_source_through_the_volume(self):
        volume = self.publish()
        self.mmap_loader(volume.target)
        message = volume.message
        self.assertIn("--allow-root", message["args"])
        self.assertIn("--prefix=%s/" % MODEL, message["args"])
        self.assertIn("--user-agent-prefix=" + user_agent(), message["args"], "one argument, spaces and all")
        self.assertEqual(message["args"], sorted(message["args"]))
        self.assertEqual([e.split("=")[0] for e in message["env"]],
                         sorted(["AWS_CONFIG_FILE", "AWS_PROFILE", "AWS_SHARED_CREDENTIALS_FILE"] +
                                list(self.sanitizer_env())))
        stats = self.stats()
        self.assertEqual(set(stats["s3_signers"]), {KEY1}, "every request signed with the profile's key")
        self.assertTrue(stats["s3_user_agents"], stats)
        for agent in stats["s3_user_agents"]:
            self.assertTrue(agent.startswith(user_agent() + " tensorfs/"), agent)
        self.stop()
        self.assertTrue(os.path.exists(os.path.join(self.comm, "mount.exit")))
        self.assertEqual(self.mount_s3_stderr(), [], "mount-s3 writes only errors on stderr")
        self.assertIn("serving s3://%s/%s/ on /dev/fd/3: the source answers" % (BUCKET, MODEL),
                      self.pod_stdout.wait(), "its log is on stdout")

    def test_uid_gid_and_modes_are_what_stat_reports_and_the_kernel_enforces(self):
        volume = self.publish(self.options("uid 1001"), fs_group=2002)
        self.assertIn("--gid=2002", volume.message["args"])
        self.assertIn("--allow-other", volume.message["args"])
        config = os.path.join(volume.target, "config.json")
        st = os.stat(config)
        self.assertEqual((st.st_uid, st.st_gid, st.st_mode & 0o7777), (1001, 2002, 0o660))
        st = os.stat(volume.target)
        self.assertEqual((st.st_uid, st.st_gid, st.st_mode & 0o7777), (1001, 2002, 0o770))
        self.assertEqual(self.as_user(3003, 2002, config)[0], 0, "the fsGroup reads")
        status, err = self.as_user(3003, 3003, config)
        self.assertNotEqual(status, 0)
        self.assertIn("Permission denied", err)
        self.stop()

    def test_allow_root_admits_root_and_the_mounts_user_only(self):
        volume = self.publish()  # no fsGroup: the driver adds --allow-root
        config = os.path.join(volume.target, "config.json")
        self.assertEqual(os.stat(config).st_mode & 0o777, 0o444, "anyone may read, by the modes")
        with open(config, "rb") as f, open(os.path.join(self.model, "config.json"), "rb") as source:
            self.assertEqual(f.read(), source.read())
        self.assertEqual(self.as_user(POD_UID, POD_UID, config)[0], 0, "the user mount-s3 runs as")
        status, err = self.as_user(3003, 3003, config)
        self.assertNotEqual(status, 0)
        self.assertIn("Permission denied", err)
        self.stop()

    def test_a_tensorfs_option_reaches_tensorfs_stats(self):
        volume = self.publish(self.options("tensorfs cache_size=96M,views=none,max_fetches=4"))
        self.assertIn("--tensorfs=cache_size=96M,views=none,max_fetches=4", volume.message["args"])
        r = subprocess.run([TENSORFS, "stats", "--json", volume.target], capture_output=True, text=True,
                           timeout=HANG_GUARD_S)
        self.assertEqual(r.returncode, 0, r.stderr)
        mount = json.loads(r.stdout)["mount"]
        self.assertEqual(mount["source"], "s3://%s/%s/" % (BUCKET, MODEL))
        self.assertEqual(mount["cache_size"], 96 << 20)
        self.assertEqual(mount["max_fetches"], 4)
        self.assertEqual(mount["views"], [])
        self.stop()

    def test_a_profile_rewritten_by_the_node_plugin_is_read_again(self):
        volume = self.publish(self.options("metadata-ttl minimal"))
        self.assertEqual(set(self.signers_after_a_listing(volume.target)), {KEY1})
        self.profile_env(KEY2, SECRET2)  # the secret changed: the plugin writes the profile again
        wait_until(lambda: KEY2 in self.signers_after_a_listing(volume.target), "a request signed with the new key",
                   self.pod)
        self.assertEqual(set(self.signers_after_a_listing(volume.target)), {KEY2})
        self.assertIn("read new AWS credentials from profile", self.pod_stdout.text)
        self.stop()

    def test_a_web_identity_token_rewritten_in_place_is_used_at_the_next_refresh(self):
        # Pod-level credentials (IRSA) as the credential provider hands them over; STS and S3
        # both at AWS_ENDPOINT_URL. Credentials live 4 s: a refresh every 3.6 s.
        control(self.endpoint, "/_control/s3/config", {"web_identity_tokens": ["token-A"], "session_lifetime": 4})
        token_file = write_credential_file(self.comm, "pod-1234-models-pv.token", "token-A")
        env = {"AWS_EC2_METADATA_DISABLED": "true", "AWS_ROLE_ARN": ROLE_ARN, "AWS_WEB_IDENTITY_TOKEN_FILE": token_file,
               "AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": self.endpoint}
        volume = self.publish(["prefix %s/" % MODEL, "metadata-ttl minimal"], env)
        self.mmap_loader(volume.target)
        issued = self.stats()["sts_issued"]
        first = [key for key, token in issued.items() if token == "token-A"]
        self.assertEqual(len(first), 1, issued)
        # The token rotates: rewritten in place (same file), and STS takes only the new one.
        with open(token_file, "r+") as f:
            f.truncate(0)
            f.write("token-B")
        control(self.endpoint, "/_control/s3/config", {"web_identity_tokens": ["token-B"]})

        def second_key():
            self.list_again(volume.target)
            keys = [key for key, token in self.stats()["sts_issued"].items() if token == "token-B"]
            return keys[0] if keys else None
        wait_until(lambda: second_key() is not None, "credentials for the rewritten token", self.pod)
        key_b = second_key()
        self.assertEqual(set(self.signers_after_a_listing(volume.target)), {key_b},
                         "the requests after the refresh are signed with the new credentials")
        self.assertIn("refreshed AWS credentials via web identity token", self.pod_stdout.text)
        self.stop()

    def test_container_credentials_read_their_token_file_again_at_each_refresh(self):
        # Pod-level credentials through EKS Pod Identity.
        control(self.endpoint, "/_control/s3/config", {"container_token": "pod-identity-1", "session_lifetime": 4})
        token_file = write_credential_file(self.comm, "pod-1234-models-pv-eks-pod-identity.token", "pod-identity-1")
        env = {"AWS_EC2_METADATA_DISABLED": "true",
               "AWS_CONTAINER_CREDENTIALS_FULL_URI": self.endpoint + "/_aws/container-credentials",
               "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": token_file}
        volume = self.publish(self.options("metadata-ttl minimal"), env)
        self.mmap_loader(volume.target)
        before = set(self.stats()["s3_signers"])
        self.assertTrue(before and all(key.startswith("ASIA") for key in before), before)
        write_credential_file(self.comm, "pod-1234-models-pv-eks-pod-identity.token", "pod-identity-2")
        control(self.endpoint, "/_control/s3/config", {"container_token": "pod-identity-2"})
        wait_until(lambda: set(self.signers_after_a_listing(volume.target)) - before,
                   "credentials fetched with the new token", self.pod)
        self.stop()

    def test_the_instance_role_when_the_driver_passes_no_credentials(self):
        volume = self.publish(env={"AWS_EC2_METADATA_SERVICE_ENDPOINT": self.endpoint})
        self.mmap_loader(volume.target)
        stats = self.stats()
        self.assertGreaterEqual(stats["imds_requests"], 3, "token, role, credentials")
        self.assertTrue(all(key.startswith("ASIA") for key in stats["s3_signers"]), stats["s3_signers"])
        self.stop()

    def test_no_credentials_with_instance_metadata_disabled_fail_the_mount_saying_what_was_tried(self):
        error = self.publish_failing(env={"AWS_EC2_METADATA_DISABLED": "true"})
        self.assertIn("Mountpoint Pod failed", error)
        self.assertIn("no AWS credentials found", error)
        self.assertIn("AWS_EC2_METADATA_DISABLED=true", error)
        self.assertEqual(self.pod.returncode, 255, self.logs())
        self.assertIn("exit status 5", self.pod_stderr.wait())

    def test_a_missing_bucket_fails_the_mount_with_the_reason_on_stderr(self):
        # The mount answers the kernel before the bucket does: the node plugin may have
        # found it ready, or may still be waiting and read mount.err.
        env = self.profile_env()
        env.update(self.sanitizer_env())
        try:
            self.plugin.publish("models-pv", "no-such-bucket", self.comm, self.options(), env)
        except PublishError as e:
            self.assertIn("no-such-bucket", str(e))
        self.pod.wait(HANG_GUARD_S)
        self.assertEqual(self.pod.returncode, 255, "the Mountpoint Pod is restarted\n" + self.logs())
        self.assertIn("exit status 4", self.pod_stderr.wait())
        with open(os.path.join(self.comm, "mount.err")) as f:
            kept = f.read()
        self.assertIn("no-such-bucket", kept)
        self.assertIn("not found", kept)
        with open(os.path.join(self.comm, "mount.err")) as f:
            kept = f.read()
        self.assertEqual(kept.splitlines(), self.mount_s3_stderr(), "mount.err is the whole of mount-s3's stderr")
        for line in kept.splitlines():
            self.assertNotIn(" info ", line, "only errors on stderr")

    def test_a_write_option_is_refused(self):
        error = self.publish_failing(options=self.options("allow-delete"))
        self.assertIn("error: --allow-delete asks for writes", error)
        self.assertIn("remove it from the volume's mountOptions", error)
        self.assertIn("exit status 2", self.pod_stderr.wait())


if __name__ == "__main__":
    if os.geteuid() != 0 or not TENSORFS or not TESTDATA or not BUILD_DIR:
        print("needs root, TENSORFS_BINARY, TENSORFS_BUILD_DIR and TENSORFS_TESTDATA", file=sys.stderr)
        sys.exit(1)
    run_tests()

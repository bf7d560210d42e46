#!/usr/bin/python3
"""`tensorfs gke-sidecar` with a test double of the node plugin of Google's
Cloud Storage FUSE CSI driver (tests/support/gke_node_plugin.py), as GKE runs
them: the plugin mounts /dev/fuse on each volume's target and hands the
descriptor over TMP/.volumes/VOL/socket; the sidecar runs as uid 65534 without
any capability, on a read-only root where only TMP is writable, in a mount
namespace without /dev/fuse and without the targets, as the pod's
gke-gcsfuse-sidecar container does. The bucket is the GCS test server's
(STORAGE_EMULATOR_HOST). What a user would check: the tensors an mmap loader
reads equal the source, what a file reports, the node plugin's reading of the
error file, the sidecar's exit status.

  TENSORFS_BINARY=build/release/fs/tensorfs \\
  TENSORFS_TESTDATA=build/release/tests/support/tensorfs-testdata \\
      tests/fs/gke_sidecar_test.py [-k NAME]

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

HERE = os.path.dirname(os.path.abspath(__file__))
SUPPORT = os.path.join(HERE, "..", "support")
TENSORFS = os.path.abspath(os.environ["TENSORFS_BINARY"]) if os.environ.get("TENSORFS_BINARY") else ""
TESTDATA = os.environ.get("TENSORFS_TESTDATA", "")

sys.path.insert(0, SUPPORT)
from daemon_check import check_end, run_tests  # noqa: E402
from gke_node_plugin import GkeNodePlugin, grpc_code  # noqa: E402
from container import HANG_GUARD_S, Output, sandboxed, start_gcs_server, wait_serving, wait_until  # noqa: E402

BUCKET = "bucket"
MODEL = "llama"  # the checkpoint's directory in the bucket


class GkeSidecarTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="tensorfs_gke.")
        os.chmod(cls.work, 0o755)
        data = os.path.join(cls.work, "data")
        cls.model = os.path.join(data, BUCKET, MODEL)
        subprocess.run([TESTDATA, "--arch", "llama", "--size-mib", "8", "--shards", "2", "--out", cls.model],
                       check=True, capture_output=True, timeout=HANG_GUARD_S)
        cls.server, cls.endpoint = start_gcs_server(data, cls.work)

    @classmethod
    def tearDownClass(cls):
        cls.server.terminate()
        cls.server.wait(HANG_GUARD_S)
        shutil.rmtree(cls.work, ignore_errors=True)

    def setUp(self):
        self.pod = tempfile.mkdtemp(prefix="pod.", dir=self.work)
        os.chmod(self.pod, 0o755)
        self.tmp = os.path.join(self.pod, "gke-gcsfuse-tmp")  # an emptyDir: 0777, as kubelet makes it
        os.mkdir(self.tmp)
        os.chmod(self.tmp, 0o777)
        self.plugin = GkeNodePlugin(self.tmp)
        self.sidecar = None

    def tearDown(self):
        if self.sidecar is not None and self.sidecar.poll() is None:
            self.sidecar.send_signal(signal.SIGINT)  # stops either kind, and its mounts with it
            try:
                self.sidecar.wait(HANG_GUARD_S)
            except subprocess.TimeoutExpired:
                self.sidecar.kill()
        if self.sidecar is not None:
            self.sidecar.wait(HANG_GUARD_S)
            self.sidecar.stdout.close()
            self.sidecar.stderr.close()
        self.plugin.unpublish_all()
        shutil.rmtree(self.pod, ignore_errors=True)

    def target(self, volume):
        return os.path.join(self.pod, "volumes", "kubernetes.io~csi", volume, "mount")

    def publish(self, volume, options=(), bucket=BUCKET, **kwargs):
        return self.plugin.publish(volume, bucket, self.target(volume), options, **kwargs)

    def start_sidecar(self, native=False):
        """The sidecar as the webhook injects it (args ["--v=5"]), once the volumes are published."""
        env = dict(os.environ, STORAGE_EMULATOR_HOST=self.endpoint)
        env.pop("NATIVE_SIDECAR", None)
        if native:
            env["NATIVE_SIDECAR"] = "TRUE"
        argv = sandboxed([TENSORFS, "gke-sidecar", "--tmp-dir", self.tmp, "--v=5"],
                         hide=[v.target for v in self.plugin.volumes], read_only_root=True, writable=[self.tmp])
        self.sidecar = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                        cwd="/")
        self.stdout = Output(self.sidecar.stdout)
        self.stderr = Output(self.sidecar.stderr)
        return self.sidecar

    def logs(self):
        return "stdout:\n%s\nstderr:\n%s" % (self.stdout.text, self.stderr.text)

    def wait_error(self, volume):
        wait_until(lambda: volume.error_text(), "an error in %s" % volume.error_file, self.sidecar)
        return volume.error_text()

    def mmap_loader(self, mounted):
        r = subprocess.run([sys.executable, os.path.join(SUPPORT, "mmap_loader.py"), mounted, "--compare", self.model],
                           capture_output=True, text=True, timeout=HANG_GUARD_S * 5)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def stop_native(self):
        self.sidecar.send_signal(signal.SIGTERM)
        check_end(self, self.sidecar, "SIGTERM to a native sidecar", log=self.logs)

    def test_an_mmap_loader_reads_the_source_through_a_read_only_volume(self):
        volume = self.publish("ckpt", ["implicit-dirs"], read_only=True)
        self.start_sidecar(native=True)
        wait_serving(volume.target, self.sidecar)
        self.mmap_loader(os.path.join(volume.target, MODEL))
        self.assertEqual(volume.error_text(), "")
        self.assertFalse(os.path.exists(volume.socket_path), "the sidecar deletes the socket it was served on")
        self.stop_native()
        self.assertEqual(self.stderr.wait(), "", "no error line")

    def test_only_dir_is_the_root_of_the_volume(self):
        volume = self.publish("ckpt", ["only-dir=/%s/" % MODEL])
        self.start_sidecar(native=True)
        wait_serving(volume.target, self.sidecar)
        listing = os.listdir(volume.target)
        self.assertLessEqual(set(os.listdir(self.model)), set(listing))  # and the views tensorfs adds
        self.assertNotIn(MODEL, listing)
        self.mmap_loader(volume.target)
        self.stop_native()

    def test_uid_gid_and_modes_are_what_the_files_report_and_the_kernel_enforces(self):
        # What the driver adds for a pod's fsGroup, and a uid of the user's.
        volume = self.publish("ckpt", ["uid=1001", "gid=2002", "file-mode=640", "dir-mode=750",
                                       "only-dir=" + MODEL])
        self.start_sidecar(native=True)
        wait_serving(volume.target, self.sidecar)
        config = os.path.join(volume.target, "config.json")
        st = os.stat(config)
        self.assertEqual((st.st_uid, st.st_gid, st.st_mode & 0o7777), (1001, 2002, 0o640))
        st = os.stat(volume.target)
        self.assertEqual((st.st_uid, st.st_gid, st.st_mode & 0o7777), (1001, 2002, 0o750))
        as_group = subprocess.run(["setpriv", "--reuid=3003", "--regid=2002", "--clear-groups", "cat", config],
                                  capture_output=True, timeout=HANG_GUARD_S)
        self.assertEqual(as_group.returncode, 0, as_group.stderr)
        as_other = subprocess.run(["setpriv", "--reuid=3003", "--regid=3003", "--clear-groups", "cat", config],
                                  capture_output=True, text=True, timeout=HANG_GUARD_S)
        self.assertNotEqual(as_other.returncode, 0)
        self.assertIn("Permission denied", as_other.stderr)
        self.stop_native()

    def test_a_tensorfs_option_reaches_the_mount(self):
        volume = self.publish("ckpt", ["tensorfs:cache_size:96M", "tensorfs:max-fetches:4",
                                       "tensorfs:views:none"])
        self.start_sidecar(native=True)
        wait_serving(volume.target, self.sidecar)
        stats = subprocess.run([TENSORFS, "stats", "--json", volume.target], capture_output=True, text=True,
                               check=True, timeout=HANG_GUARD_S)
        mount = json.loads(stats.stdout)["mount"]
        self.assertEqual(mount["source"], "gs://%s" % BUCKET)
        self.assertEqual(mount["cache_size"], 96 << 20)
        self.assertEqual(mount["max_fetches"], 4)
        self.assertEqual(mount["views"], [])
        self.stop_native()

    def test_the_node_plugin_scrapes_the_volumes_metrics_on_metrics_sock(self):
        volume = self.publish("ckpt", ["only-dir=" + MODEL])
        self.start_sidecar(native=True)
        wait_serving(volume.target, self.sidecar)
        self.mmap_loader(volume.target)
        reply = self.plugin.scrape_metrics(volume)
        self.assertTrue(reply.startswith("HTTP/1.1 200"), reply[:200])
        reads = [line for line in reply.splitlines() if line.startswith("tensorfs_read_requests_total ")]
        self.assertEqual(len(reads), 1, reply)
        self.assertGreater(float(reads[0].split()[1]), 0)
        self.stop_native()

    def test_gcsfuse_options_without_an_equivalent_are_ignored_with_one_line_each(self):
        ignored = ["implicit-dirs", "file-cache:max-size-mb:-1", "metadata-cache:stat-cache-max-size-mb:-1",
                   "logging:severity:debug", "enable-sidecar-bucket-access-check=true"]
        volume = self.publish("ckpt", ignored)
        self.start_sidecar(native=True)
        wait_serving(volume.target, self.sidecar)
        self.mmap_loader(os.path.join(volume.target, MODEL))
        self.stop_native()
        log = self.stdout.wait()
        for option in ignored:
            lines = [line for line in log.splitlines() if "ignoring option %s:" % option in line]
            self.assertEqual(len(lines), 1, "%s in:\n%s" % (option, log))
        self.assertEqual(volume.error_text(), "")

    def test_a_missing_bucket_is_not_found_for_the_node_plugin_and_the_sidecar_keeps_running(self):
        volume = self.publish("ckpt", bucket="no-such-bucket")
        self.start_sidecar()
        error = self.wait_error(volume)
        self.assertIn("bucket doesn't exist", error)
        self.assertIn("no-such-bucket", error)
        self.assertEqual(grpc_code(error), "NotFound")
        self.assertEqual(len(error.splitlines()), 1, error)
        wait_until(lambda: "no-such-bucket" in self.stderr.text, "the error on stderr", self.sidecar)
        self.assertIsNone(self.sidecar.poll(), "a volume's failure does not end the sidecar")

    def test_one_failing_volume_leaves_the_other_serving(self):
        good = self.publish("good", ["only-dir=" + MODEL])
        dynamic = self.publish("dynamic", bucket="_")  # the driver's dynamic mount: refused
        self.start_sidecar(native=True)
        error = self.wait_error(dynamic)
        self.assertEqual(grpc_code(error), "InvalidArgument", error)
        self.assertIn("bucket \"_\"", error)
        wait_serving(good.target, self.sidecar)
        self.mmap_loader(good.target)
        self.assertEqual(good.error_text(), "")
        self.stop_native()

    def test_a_mount_that_dies_is_reported_in_its_error_file(self):
        volume = self.publish("ckpt")
        self.start_sidecar()
        wait_serving(volume.target, self.sidecar)
        children = subprocess.run(["pgrep", "-P", str(self.sidecar.pid)], capture_output=True, text=True,
                                  timeout=HANG_GUARD_S).stdout.split()
        self.assertEqual(len(children), 1, children)
        os.kill(int(children[0]), signal.SIGKILL)  # as the OOM killer would
        error = self.wait_error(volume)
        self.assertEqual(grpc_code(error), "ResourceExhausted", error)
        self.assertIsNone(self.sidecar.poll())

    def test_a_native_sidecar_stops_on_sigterm_with_status_0(self):
        volume = self.publish("ckpt")
        self.start_sidecar(native=True)
        wait_serving(volume.target, self.sidecar)
        self.stop_native()
        self.assertIn("SIGTERM: stopping", self.stdout.wait())
        self.assertEqual(volume.error_text(), "")

    def test_a_regular_sidecar_serves_through_sigterm_and_stops_on_the_exit_file(self):
        volume = self.publish("ckpt", ["only-dir=" + MODEL])
        self.start_sidecar()
        wait_serving(volume.target, self.sidecar)
        self.sidecar.send_signal(signal.SIGTERM)
        wait_until(lambda: "keeps serving" in self.stdout.text, "the sidecar to take SIGTERM", self.sidecar)
        self.mmap_loader(volume.target)
        exit_file = self.plugin.put_exit_file()
        check_end(self, self.sidecar, "the exit file", log=self.logs)
        self.assertFalse(os.path.exists(exit_file), "the sidecar deletes the exit file")
        self.assertEqual(volume.error_text(), "")

    def test_the_bucket_name_key_of_older_drivers_is_understood(self):
        volume = self.publish("ckpt", ["only-dir=" + MODEL], legacy_key=True)
        self.start_sidecar(native=True)
        wait_serving(volume.target, self.sidecar)
        self.mmap_loader(volume.target)
        self.stop_native()


if __name__ == "__main__":
    if os.geteuid() != 0 or not TENSORFS or not TESTDATA:
        print("needs root, TENSORFS_BINARY and TENSORFS_TESTDATA", file=sys.stderr)
        sys.exit(1)
    run_tests()

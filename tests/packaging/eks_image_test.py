#!/usr/bin/python3
"""The EKS image: tensorfs' mount-s3 bundle, built and run in a root file
system that holds nothing else:

    eks_image_test.py --build-dir BUILD_DIR

packaging/build-eks-image.sh makes the OCI archive from BUILD_DIR's tensorfs
and launcher, and the Dockerfile that layers it onto the Mountpoint for Amazon
S3 CSI driver's image. The archive is unpacked with umoci; its root holds the
bundle, /dev and /proc and nothing else (no Debian library, no shell). The
test double of aws-s3-csi-mounter (tests/support/aws_s3_csi_mounter.py) runs
the image's process (mount-s3, user 1000) in that root through
tests/support/oci_run.py (a fresh /dev without fuse, /proc, no capability,
/comm the Mountpoint Pod's emptyDir), with exactly the environment the node
plugin's double (tests/support/s3_csi_driver.py) sends: a profile under
/comm/credentials, SigV4 checked by the S3 dialect of the GCS test server.
Checked: the Dockerfile, the image's config and contents, an mmap loader's
tensors through the volume equal the source, the unmount ends everything with
status 0. Prints how long each step took. Needs root and umoci
(packaging/install-deps.sh), and TENSORFS_TESTDATA; exits 1 on any failure.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.realpath(os.path.join(HERE, "..", ".."))
SUPPORT = os.path.join(SRC, "tests", "support")
sys.path.insert(0, SUPPORT)
from container import HANG_GUARD_S, Output, fail, run_or_fail as run, start_gcs_server  # noqa: E402
from s3_csi_driver import PublishError, S3CsiNodePlugin, long_term_profile  # noqa: E402

BIN_DIR = "/mountpoint-s3/bin"
DRIVER_IMAGE = "public.ecr.aws/mountpoint-s3-csi-driver/aws-mountpoint-s3-csi-driver:v2.7.0"
KEY, SECRET = "AKIAIMAGETESTKEY01", "image-secret"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build-dir", required=True)
    args = parser.parse_args()
    testdata = os.environ.get("TENSORFS_TESTDATA", "")
    if os.geteuid() != 0:
        fail("needs root (umoci, chroot, mount(2))")
    if shutil.which("umoci") is None:
        fail("umoci is not installed: run packaging/install-deps.sh")
    if not testdata:
        fail("needs TENSORFS_TESTDATA")

    work = tempfile.mkdtemp(prefix="tensorfs-eks-image-test.")
    os.chmod(work, 0o755)
    plugin = None
    pod = None
    server = None
    timings = []
    try:
        start = time.monotonic()
        image = os.path.join(work, "tensorfs-mount-s3.tar")
        print(run(["bash", os.path.join(SRC, "packaging", "build-eks-image.sh"), args.build_dir, image, "--tag", "t1"],
                  "build-eks-image.sh", timeout=600).strip())
        timings.append(("image", time.monotonic() - start))
        with open(os.path.join(work, "tensorfs-mount-s3.Dockerfile")) as f:
            dockerfile = f.read()
        for want in ["FROM ${BUNDLE} AS tensorfs", "FROM " + DRIVER_IMAGE,
                     "COPY --from=tensorfs %s/ %s/" % (BIN_DIR, BIN_DIR), "ARG BUNDLE=tensorfs-mount-s3:t1"]:
            if want not in dockerfile.splitlines():
                fail("the Dockerfile lacks the line %r:\n%s" % (want, dockerfile))

        step = time.monotonic()
        layout, bundle = os.path.join(work, "oci"), os.path.join(work, "bundle")
        os.mkdir(layout)
        run(["tar", "-C", layout, "-xf", image], "tar -x")
        run(["umoci", "unpack", "--image", layout + ":t1", bundle], "umoci unpack")
        with open(os.path.join(bundle, "config.json")) as f:
            process = json.load(f)["process"]
        if process["args"] != [BIN_DIR + "/mount-s3"]:
            fail("the image's entrypoint is %s" % process["args"])
        if (process["user"]["uid"], process["user"]["gid"]) != (1000, 1000):
            fail("the image's user is %s" % process["user"])
        rootfs = os.path.join(bundle, "rootfs")
        top = sorted(os.listdir(rootfs))
        if top != ["dev", "mountpoint-s3", "proc"]:
            fail("the image's root holds %s, not just the bundle, /dev and /proc" % top)
        if os.listdir(os.path.join(rootfs, "dev")) or os.listdir(os.path.join(rootfs, "proc")):
            fail("the image's /dev or /proc is not empty")
        timings.append(("unpack", time.monotonic() - step))

        step = time.monotonic()
        data = os.path.join(work, "data")
        model = os.path.join(data, "models", "llama")
        subprocess.run([testdata, "--arch", "llama", "--size-mib", "8", "--shards", "2", "--out", model],
                       check=True, capture_output=True, timeout=HANG_GUARD_S)
        server, endpoint = start_gcs_server(data, work, ["--require-auth", "--s3-key", "%s:%s" % (KEY, SECRET)])
        node = os.path.join(work, "node")
        comm = os.path.join(node, "comm")  # the Mountpoint Pod's emptyDir, its /comm
        os.makedirs(comm)
        os.chown(comm, 0, 1000)
        os.chmod(comm, 0o2770)
        plugin = S3CsiNodePlugin(os.path.join(node, "kubelet"))
        source, target = plugin.paths("models-pv")
        pod = subprocess.Popen([sys.executable, os.path.join(SUPPORT, "aws_s3_csi_mounter.py"), "--comm", comm,
                                "--oci-bundle", bundle, "--local-cache", os.path.join(node, "local-cache"),
                                "--hide", target, "--hide", source],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                               start_new_session=True)
        output = Output(pod.stdout)
        env = long_term_profile(comm, "pod-1-models-pv-", KEY, SECRET, pod_comm="/comm")
        try:
            volume = plugin.publish("models-pv", "models", comm,
                                    ["prefix llama/", "region us-east-1", "endpoint-url " + endpoint], env)
        except PublishError as e:
            fail("%s\n%s" % (e, output.text))
        r = subprocess.run([sys.executable, os.path.join(SUPPORT, "mmap_loader.py"), volume.target, "--compare", model],
                           capture_output=True, text=True, timeout=HANG_GUARD_S * 5)
        if r.returncode != 0:
            fail("the mmap loader through the volume:\n%s%s\n%s" % (r.stdout, r.stderr, output.text))
        plugin.unpublish_all()
        plugin = None
        rc = pod.wait(HANG_GUARD_S)
        if rc != 0:
            fail("the Mountpoint Pod exited with %d after the unmount:\n%s" % (rc, output.wait()))
        timings.append(("serve, read, unmount", time.monotonic() - step))
        log = output.wait()
        print(log.rstrip())
        if "Mountpoint exited with 0 exit code" not in log:
            fail("mount-s3 did not exit 0")
        print("image: %.1f MiB; " % (os.path.getsize(image) / (1 << 20)) +
              ", ".join("%s %.1f s" % t for t in timings) + "; total %.1f s" % (time.monotonic() - start))
        print("PASS")
    finally:
        if plugin is not None:
            plugin.unpublish_all()
        if pod is not None and pod.poll() is None:
            os.killpg(pod.pid, signal.SIGKILL)
            pod.wait(HANG_GUARD_S)
        if server is not None:
            server.terminate()
            server.wait(HANG_GUARD_S)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

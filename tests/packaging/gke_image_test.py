#!/usr/bin/python3
"""The GKE sidecar image, built and run as a pod runs it:

    gke_image_test.py (--deb DEB | --build-dir BUILD_DIR) [--root CACHED_ROOT]

packaging/build-gke-image.sh builds the image from DEB (or from the package
cpack makes in BUILD_DIR), starting from CACHED_ROOT when given and present
(a Debian 12 root such as tests/systemd/boot_test.sh's), else debootstrapping
one. The OCI archive is unpacked with umoci and its process, as the image's
config says (entrypoint, user 65534), is run as the pod's gke-gcsfuse-sidecar
container is (tests/support/oci_run.py: read-only root, no capability, no
/dev/fuse, the emptyDirs /gcsfuse-tmp, /gcsfuse-buffer, /gcsfuse-cache
writable, args ["--v=5"], NATIVE_SIDECAR=TRUE), with the test double of the
node plugin (tests/support/gke_node_plugin.py) handing it a read-only volume of
a bucket on the GCS test server. Checked: the image's size (under 120 MiB),
its config, an mmap loader's tensors through the volume equal the source, no
error file, SIGTERM stops it with status 0. Prints how long each step took.
Needs root and umoci (packaging/install-deps.sh); exits 1 on any failure.
"""
import argparse
import glob
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
from gke_node_plugin import GkeNodePlugin, grpc_code  # noqa: E402
from container import HANG_GUARD_S, Output, fail, run_or_fail as run, start_gcs_server, wait_serving  # noqa: E402

MAX_IMAGE_MIB = 120


def make_checkpoint(directory):
    """A small two-shard safetensors checkpoint, as a loader finds one."""
    import numpy as np
    os.makedirs(directory)
    rng = np.random.default_rng(7)
    index = {}
    for shard in (1, 2):
        name = "model-%05d-of-00002.safetensors" % shard
        tensors, blob = {}, b""
        for i in range(4):
            data = rng.integers(0, 2**16, size=(256, 512), dtype=np.uint16).tobytes()
            key = "model.layers.%d.mlp.w%d.weight" % (shard, i)
            tensors[key] = {"dtype": "BF16", "shape": [256, 512], "data_offsets": [len(blob), len(blob) + len(data)]}
            index[key] = name
            blob += data
        header = json.dumps(tensors).encode()
        header += b" " * (-len(header) % 8)
        with open(os.path.join(directory, name), "wb") as f:
            f.write(len(header).to_bytes(8, "little") + header + blob)
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": index}, f)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}, f)


def main():
    parser = argparse.ArgumentParser()
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--deb")
    source.add_argument("--build-dir")
    parser.add_argument("--root", help="a cached Debian 12 root to start from (used when present)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        fail("needs root (debootstrap or an overlay, chroot, mount(2))")
    if shutil.which("umoci") is None:
        fail("umoci is not installed: run packaging/install-deps.sh")

    work = tempfile.mkdtemp(prefix="tensorfs-gke-image-test.")
    os.chmod(work, 0o755)
    plugin = None
    sidecar = None
    server = None
    timings = []
    try:
        start = time.monotonic()
        deb = args.deb
        if deb is not None and os.path.isdir(deb):  # the directory the run's package was built in
            debs = glob.glob(os.path.join(deb, "tensorfs_*.deb"))
            if len(debs) != 1:
                fail("expected one tensorfs_*.deb in %s: %s" % (deb, debs))
            deb = debs[0]
        if deb is None:
            run(["cpack", "-G", "DEB", "-B", os.path.join(work, "pkg")], "cpack", cwd=args.build_dir)
            debs = glob.glob(os.path.join(work, "pkg", "tensorfs_*.deb"))
            if len(debs) != 1:
                fail("cpack made %s" % debs)
            deb = debs[0]
            timings.append(("cpack", time.monotonic() - start))

        step = time.monotonic()
        image = os.path.join(work, "tensorfs-gke.tar")
        build = [os.path.join(SRC, "packaging", "build-gke-image.sh"), deb, image]
        if args.root and os.path.isdir(args.root):
            build += ["--root", args.root]
        print(run(build, "build-gke-image.sh", timeout=1200).strip())
        timings.append(("image" + (" from the cached root" if "--root" in build else " with debootstrap"),
                        time.monotonic() - step))
        size_mib = os.path.getsize(image) / (1 << 20)
        if size_mib >= MAX_IMAGE_MIB:
            fail("the image is %.0f MiB, over %d MiB" % (size_mib, MAX_IMAGE_MIB))

        step = time.monotonic()
        layout, bundle = os.path.join(work, "oci"), os.path.join(work, "bundle")
        os.mkdir(layout)
        run(["tar", "-C", layout, "-xf", image], "tar -x")
        with open(os.path.join(layout, "index.json")) as f:
            tag = json.load(f)["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"]
        run(["umoci", "unpack", "--image", "%s:%s" % (layout, tag), bundle], "umoci unpack")
        with open(os.path.join(bundle, "config.json")) as f:
            process = json.load(f)["process"]
        if process["args"] != ["tensorfs", "gke-sidecar"]:
            fail("the image's entrypoint is %s" % process["args"])
        if (process["user"]["uid"], process["user"]["gid"]) != (65534, 65534):
            fail("the image's user is %s" % process["user"])
        timings.append(("unpack", time.monotonic() - step))

        step = time.monotonic()
        data = os.path.join(work, "data")
        model = os.path.join(data, "models", "llama")
        make_checkpoint(model)
        server, endpoint = start_gcs_server(data, work)
        pod = os.path.join(work, "pod")
        dirs = {}
        for name in ("gcsfuse-tmp", "gcsfuse-buffer", "gcsfuse-cache"):  # the pod's emptyDirs
            dirs[name] = os.path.join(pod, name)
            os.makedirs(dirs[name])
            os.chmod(dirs[name], 0o777)
        plugin = GkeNodePlugin(dirs["gcsfuse-tmp"])
        target = os.path.join(pod, "volumes", "kubernetes.io~csi", "llama", "mount")
        volume = plugin.publish("llama", "models", target, ["only-dir=llama", "implicit-dirs"], read_only=True)
        argv = [sys.executable, os.path.join(SUPPORT, "oci_run.py"), bundle, "--hide", target,
                "--env", "NATIVE_SIDECAR=TRUE", "--env", "STORAGE_EMULATOR_HOST=" + endpoint]
        for name, path in dirs.items():
            argv += ["--bind", "%s:/%s" % (path, name)]
        sidecar = subprocess.Popen(argv + ["--", "--v=5"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        output = Output(sidecar.stdout)
        try:
            wait_serving(target, sidecar)
        except AssertionError as e:
            fail("%s\n%s" % (e, output.text))
        r = subprocess.run([sys.executable, os.path.join(SUPPORT, "mmap_loader.py"), target, "--compare", model],
                           capture_output=True, text=True, timeout=HANG_GUARD_S * 5)
        if r.returncode != 0:
            fail("the mmap loader through the volume:\n%s%s\n%s" % (r.stdout, r.stderr, output.text))
        if volume.error_text():
            fail("the volume's error file: %s (%s)" % (volume.error_text(), grpc_code(volume.error_text())))
        sidecar.send_signal(signal.SIGTERM)
        rc = sidecar.wait(HANG_GUARD_S)
        if rc != 0:
            fail("the sidecar exited with %d after SIGTERM:\n%s" % (rc, output.wait()))
        timings.append(("serve, read, stop", time.monotonic() - step))
        print(output.wait().rstrip())
        print("image: %.1f MiB; " % size_mib + ", ".join("%s %.1f s" % t for t in timings) +
              "; total %.1f s" % (time.monotonic() - start))
        print("PASS")
    finally:
        if sidecar is not None and sidecar.poll() is None:
            sidecar.kill()
            sidecar.wait(HANG_GUARD_S)
        if plugin is not None:
            plugin.unpublish_all()
        if server is not None:
            server.terminate()
            server.wait(HANG_GUARD_S)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

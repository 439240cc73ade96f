"""The command line that starts one submission's kernel inside bubblewrap (`bwrap`).

bubblewrap is the sandbox Flatpak uses: it builds the kernel a world of its own from namespaces
and mounts, and we drive it with its documented options only. What the kernel gets:
- **no network**: a network namespace with only its own loopback (`--unshare-net`), so no grader
  service (a Dask scheduler, a database, a notebook server) can be reached; the grader talks to
  the kernel through Unix sockets in the one folder it shares with it (`Plan.exchange`);
- **its own processes** (`--unshare-pid`): bubblewrap's init reaps them and, when the kernel
  ends, the namespace ends and every process in it is killed (`--die-with-parent` ends it with
  the grader); `--new-session` keeps it off the grader's terminal;
- **an allow-listed filesystem**: read-only `/usr`, the Python environment and the learner's part
  of the package (`autograder.learner`, `autograder.checks`); nothing else of `/etc` than what
  programs need to start; private, size-capped tmpfs for `/tmp`, `/dev/shm` and the working
  folder (gone when the kernel ends); the grader part of the package, `solutions/`, answer keys,
  other submissions and the grader's home are simply not there;
- **limits** (`prlimit`): processes, file size, data memory (not on GPU machines, where CUDA's own
  mappings might exceed it: unverified), no core files; the grader watches the sandbox's memory;
- **a user that is not the grader**: where the grader is root, a fresh uid with no groups and no
  capabilities (`setpriv`, after bubblewrap has built the mounts); otherwise a user namespace
  (`--unshare-user`), where the kernel runs as the grader's own user but sees only the above;
- **an allow-listed environment** (`--clearenv`, then `--setenv` for each variable);
- **no new namespaces, mounts, keyrings, bpf or ptrace**: a seccomp filter (`--seccomp`, compiled by
  `autograder.grader.seccomp`), and a CPU-time limit per process (`prlimit --cpu`).
On a machine with NVIDIA GPUs the device nodes are bound so that CUDA works inside.

Triton (notebook 09) needs nothing more: without a GPU it runs in its interpreter, and its cache
is in the working folder (`isolation.kernel_env`). On a GPU its compiler would also run ptxas
(from the Python environment), the C compiler of `/usr` with the bound Python's headers (for its
launcher stub, loaded from that cache) and `/sbin/ldconfig` (to find libcuda): unverified.
"""
import dataclasses
import functools
import os
import pathlib
import shutil
import site
import subprocess
import sys

from autograder.grader import seccomp

# Files of /etc that programs need to start (the dynamic loader, time zone, fonts for plots and
# graph drawings, alternatives behind /usr/bin links); passwd and group are written per sandbox.
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "fonts", "alternatives", "mime.types")
TOP_LEVEL_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")  # usually links into /usr
NVIDIA = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset", "nvidia-caps")
SANDBOX_USER = "student"
UNPRIVILEGED_UID = 1000  # the kernel's uid inside a user namespace (the grader's own outside)
SECCOMP_FD = 9  # the descriptor bwrap reads the seccomp filter from


@dataclasses.dataclass(frozen=True)
class Plan:
    """One sandbox. Paths are absolute paths of the grader's machine; inside they keep their names.

    `uid`: the host user id the kernel runs as (the grader is root), or None to run in a user
    namespace as the grader's own user. `readable`: extra files the kernel may read (plain mode's
    answer keys). `hidden`: paths that must stay unreachable; a plan that would expose one is refused.
    """
    workdir: str
    exchange: str
    env: dict
    uid: int | None = None
    scratch_mb: int = 256
    processes: int = 256
    file_mb: int = 256
    data_mb: int = 8192
    readable: tuple = ()
    hidden: tuple = ()
    seccomp: str | None = None  # a BPF program file (autograder.grader.seccomp) the sandbox runs under
    cpu_seconds: int | None = None  # CPU time of each process of the sandbox (RLIMIT_CPU)


def bwrap() -> str | None:
    return shutil.which("bwrap")


def _inside(path, folder) -> bool:
    return os.path.commonpath([path, folder]) == folder


def python_paths() -> list:
    """Folders of this Python: its installation, its environment and their site-packages."""
    found = [sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable)),
             *site.getsitepackages()]
    return [p for p in dict.fromkeys(found) if os.path.isdir(p)]


def package_parts() -> dict:
    """Where the learner's package lives: {"top": [autograder folders], "keep": [what a kernel
    may import], "grader": the grader part's folder, "keys": the answer-key loader}."""
    import autograder
    import autograder.checks
    import autograder.grader
    import autograder.learner
    learner = pathlib.Path(autograder.learner.__file__).resolve().parent
    checks = pathlib.Path(autograder.checks.__file__).resolve().parent
    grader = pathlib.Path(autograder.grader.__file__).resolve().parent
    tops = list(dict.fromkeys([learner.parent, checks.parent]))
    keep = [learner, checks] + [t / "__init__.py" for t in tops if (t / "__init__.py").is_file()]
    if autograder.__file__ and pathlib.Path(autograder.__file__).resolve() not in keep:
        keep.append(pathlib.Path(autograder.__file__).resolve())
    return {"top": [str(t) for t in tops], "keep": [str(k) for k in keep], "grader": str(grader),
            "keys": [str(grader / "__init__.py"), str(grader / "keys.py")]}


def package_search_path() -> str:
    """The folders that hold the `autograder` package this grader imported, for the kernel's PYTHONPATH:
    the kernel then imports the same copy (bound read-only, learner's part only) even where the
    grader found it through PYTHONPATH on a clone rather than through its environment's install."""
    return os.pathsep.join(str(pathlib.Path(top).parent) for top in package_parts()["top"])


def nvidia_devices() -> list:
    """The NVIDIA device nodes of this machine (none without a GPU)."""
    dev = pathlib.Path("/dev")
    return sorted(str(p) for p in dev.glob("nvidia*") if p.name in NVIDIA or p.name[6:].isdigit())


class Mounts:
    """bwrap's mount options, in order, each destination's missing parents made searchable (0755):
    bwrap would otherwise create them closed (0700) to the kernel's user."""

    def __init__(self):
        self.args, self.made, self.mounted = [], {"/"}, []

    def _parents(self, path):
        for parent in map(str, reversed(pathlib.PurePosixPath(path).parents)):
            if parent not in self.made and not any(_inside(parent, m) for m in self.mounted):
                self.args += ["--perms", "0755", "--dir", parent]
                self.made.add(parent)

    def add(self, option, source, target=None, *, perms=None, size_mb=None):
        destination = target or source
        self._parents(destination)
        if size_mb is not None:
            self.args += ["--size", str(size_mb * 2**20)]
        if perms is not None:
            self.args += ["--perms", perms]
        self.args += [option] if option in ("--tmpfs", "--proc", "--dev") else [option, source]
        self.args.append(destination)
        self.made.add(destination)
        if option != "--tmpfs":  # folders can be made inside a tmpfs, not inside a bound folder
            self.mounted.append(destination)

    def link(self, target, path):
        self.args += ["--symlink", target, path]
        self.made.add(path)


def _bind_python(mounts):
    """The Python environment, read-only, at its own paths (and at its real paths, where links lead)."""
    for path in python_paths():
        real = os.path.realpath(path)
        if real.startswith("/usr/"):
            continue
        mounts.add("--ro-bind", real)
        if real != path:
            mounts.add("--ro-bind", real, path)


def filesystem(plan: Plan, plain_keys=False) -> list:
    """The mount options of a plan: everything the kernel can see. The private tmpfs folders come
    first, so that a bound path below /tmp (an answer key, the shared folder) stays visible."""
    mounts = Mounts()
    mounts.add("--ro-bind", "/usr")
    for name in TOP_LEVEL_LINKS:
        path = f"/{name}"
        if os.path.islink(path):
            mounts.link(os.readlink(path), path)
        elif os.path.isdir(path):
            mounts.add("--ro-bind", path)
    for name in ETC:
        if os.path.exists(f"/etc/{name}"):
            mounts.add("--ro-bind", f"/etc/{name}")
    mounts.add("--ro-bind", f"{plan.exchange}/passwd", "/etc/passwd")
    mounts.add("--ro-bind", f"{plan.exchange}/group", "/etc/group")
    mounts.add("--proc", None, "/proc")
    mounts.add("--dev", None, "/dev")
    mounts.add("--tmpfs", None, "/dev/shm", perms="1777", size_mb=plan.scratch_mb)
    mounts.add("--tmpfs", None, "/tmp", perms="1777", size_mb=plan.scratch_mb)
    mounts.add("--tmpfs", None, plan.workdir, perms="0777", size_mb=plan.scratch_mb)
    if os.path.isdir("/sys/devices/system/cpu"):  # torch reads the CPU's topology here
        mounts.add("--ro-bind", "/sys/devices/system/cpu")
    _bind_python(mounts)
    parts = package_parts()
    for top in parts["top"]:  # the package folder, emptied, then only the learner's part put back
        mounts.add("--tmpfs", None, top, perms="0755", size_mb=1)
    for path in parts["keep"]:
        mounts.add("--ro-bind", path)
    mounts.add("--tmpfs", None, parts["grader"], perms="0755", size_mb=1)
    if plain_keys:
        for path in parts["keys"]:
            mounts.add("--ro-bind", path)
    for path in plan.readable:
        mounts.add("--ro-bind", path)
    devices = nvidia_devices()
    for device in devices:
        mounts.add("--dev-bind", device)
    if devices and os.path.isdir("/sys"):  # CUDA reads the PCI tree and driver parameters (unverified)
        for sub in ("/sys/bus", "/sys/module", "/sys/devices"):
            if os.path.isdir(sub):
                mounts.add("--ro-bind", sub)
    mounts.add("--bind", plan.exchange)
    return mounts.args


def refused(plan: Plan, plain_keys=False) -> str | None:
    """Why a plan must not start: a source it binds is, holds or sits inside a hidden path."""
    args = filesystem(plan, plain_keys)
    sources = [args[i + 1] for i, a in enumerate(args) if a in ("--ro-bind", "--bind", "--dev-bind")]
    allowed = {os.path.realpath(p) for p in plan.readable}
    for source in map(os.path.realpath, sources):
        if source in allowed:
            continue
        for secret in map(os.path.realpath, plan.hidden):
            if _inside(source, secret) or _inside(secret, source):
                return f"the sandbox would expose {secret} (through {source})"
    return None


def limits(plan: Plan) -> list:
    """prlimit's options (inherited by everything the kernel starts)."""
    processes = plan.processes
    if plan.uid is None:  # the limit counts all of this user's processes: allow for those running now
        processes += _processes_of(os.getuid())
    data = [] if nvidia_devices() else [f"--data={plan.data_mb * 2**20}"]  # CUDA's mappings: unverified, left out
    cpu = [f"--cpu={plan.cpu_seconds}"] if plan.cpu_seconds else []
    return ["prlimit", f"--nproc={processes}", f"--fsize={plan.file_mb * 2**20}", *data, *cpu, "--core=0", "--"]


def _processes_of(uid) -> int:
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                count += entry.stat().st_uid == uid
            except OSError:
                pass
    return count


def command(plan: Plan, kernel_cmd: list, plain_keys=False) -> list:
    """The whole command: limits, bubblewrap, the user switch, then the kernel."""
    why = refused(plan, plain_keys)
    if why:
        raise PermissionError(why)
    args = [*limits(plan), bwrap() or "bwrap", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
            "--unshare-cgroup-try", "--hostname", "sandbox", "--die-with-parent", "--new-session"]
    if plan.uid is None:
        args += ["--unshare-user", "--disable-userns", "--uid", str(UNPRIVILEGED_UID), "--gid", str(UNPRIVILEGED_UID)]
    else:  # root: bubblewrap keeps only what setpriv needs to become the kernel's user
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    args += filesystem(plan, plain_keys)
    args += ["--chdir", plan.workdir, "--clearenv"]
    for name, value in {**plan.env, "PYTHONPATH": package_search_path()}.items():
        args += ["--setenv", name, value]
    if plan.seccomp:
        args += ["--seccomp", str(SECCOMP_FD)]
    if plan.uid is not None:
        args += ["--", "setpriv", f"--reuid={plan.uid}", f"--regid={plan.uid}", "--clear-groups",
                 "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
    args = [*args, "--", *kernel_cmd]
    if plan.seccomp:  # bwrap reads the filter from an open descriptor: a shell opens the file for it
        args = ["/bin/sh", "-c", f'f=$1; shift; exec "$@" {SECCOMP_FD}<"$f"', "sh", plan.seccomp, *args]
    return args


def user_files(uid) -> dict:
    """/etc/passwd and /etc/group as the kernel sees them: its own user only."""
    uid = UNPRIVILEGED_UID if uid is None else uid
    return {"passwd": f"{SANDBOX_USER}:x:{uid}:{uid}::/nonexistent:/usr/sbin/nologin\n",
            "group": f"{SANDBOX_USER}:x:{uid}:\n"}


@functools.cache
def problem() -> str | None:
    """Why kernels cannot be sandboxed on this machine, with what to do; None when they can."""
    if sys.platform != "linux":
        return (f"kernels can be sandboxed only on Linux (with bubblewrap); this is {sys.platform}. "
                "Grade in a Linux container or virtual machine")
    if bwrap() is None:
        return ("bubblewrap (bwrap) is not installed: run `bash .ci/install-bubblewrap` (or "
                "`apt-get install bubblewrap`, `dnf install bubblewrap`)")
    for tool in ("prlimit", "setpriv"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (util-linux): install it with your package manager"
    if not seccomp.available():
        return ("libseccomp cannot be loaded: install it (`apt-get install libseccomp2`, `dnf install libseccomp`); "
                "the sandbox's system-call filter is compiled with it")
    return _trial()


def _trial() -> str | None:
    """Start a kernel-less sandbox that imports the learner's package; say what went wrong."""
    import tempfile
    with tempfile.TemporaryDirectory(prefix="course-sandbox-trial-") as exchange, \
            tempfile.TemporaryDirectory(prefix="course-work-trial-") as workdir:
        for name, text in user_files(None).items():
            pathlib.Path(exchange, name).write_text(text)
        filter_path = str(pathlib.Path(workdir, "seccomp.bpf"))
        seccomp.compile_filter(filter_path)
        plan = Plan(workdir=workdir, exchange=exchange, env={"PATH": "/usr/bin:/bin"},
                    uid=65534 if os.geteuid() == 0 else None, seccomp=filter_path)
        probe = [sys.executable, "-c", "import autograder.checks"]
        try:
            done = subprocess.run(command(plan, probe), cwd=exchange, capture_output=True, text=True, timeout=120)
        except (OSError, PermissionError, subprocess.TimeoutExpired) as err:
            return f"the sandbox cannot start: {err}"
    if done.returncode == 0:
        return None
    hint = ("" if os.geteuid() == 0 else " Unprivileged user namespaces may be disabled here "
            "(kernel.unprivileged_userns_clone, user.max_user_namespaces, or AppArmor's "
            "apparmor_restrict_unprivileged_userns): grade as root, or allow them.")
    return f"the sandbox cannot start (bwrap said: {done.stderr.strip()[-400:]}).{hint}"

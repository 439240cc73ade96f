"""Each submission's kernel in a sandbox of its own, and what the grader shares with it.

A `Sandbox` is one kernel's world (built by `autograder.grader.bubblewrap`): a user of its own
(a fresh uid when the grader is root), an allow-listed environment and filesystem, no network,
and one folder it shares with the grader (`Exchange`): the kernel's connection file, the Unix
sockets it talks through (Jupyter's IPC transport: there is no network inside) and the files of
trusted-grading calls. The grader owns that folder; the kernel may write only its answers and its
socket folder, each a tmpfs of its own, so that nothing it writes can fill the grader's side.
`SandboxedKernelManager` starts a kernel in a sandbox and reaches its sockets through a relay
(`autograder.grader.relay`) that bounds each message; when the kernel ends, everything it started
ends with it, and `Sandbox.leftovers` checks that.

Where no sandbox can start (not Linux, no bubblewrap, user namespaces refused), grading stops
and says why (`require`), unless the instructor accepts unsandboxed grading explicitly.
"""
import contextlib
import os
import pathlib
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import psutil
import zmq
from jupyter_client.manager import AsyncKernelManager

from autograder.grader import bubblewrap, relay, seccomp
from autograder.grader.cgroup import Cgroup

# Top-level entries of a course directory that a kernel must never reach (none is on the sandbox's
# allow-list; a plan that would expose one is refused, see bubblewrap.refused).
SECRETS = ("solutions", "source", "submitted", "autograded", "feedback", "reports", "tests", ".git",
           "gradebook.db", "grades.csv")
FIRST_UID, LAST_UID = 1_000_000, 2_000_000_000  # far above any real account's id
HOME = f"/home/{bubblewrap.SANDBOX_USER}"  # the kernel's working folder, inside its sandbox
# The size of each side of an exchange folder, where the grader can mount a tmpfs per side (as root): the
# grader's (requests, connection file), which the kernel can only read, and the kernel's answers, the largest
# of which is its file size limit (256 MiB, as checks.boundary.Bounds.file_bytes). A kernel once wrote
# 2,000 MB to an uncapped folder on the host's /tmp in 9 s; another grew an answer the grader had unlinked
# until the grader's next request found no space, when requests and answers shared one tmpfs.
EXCHANGE_MB = 257
IPC_MB = 16  # the kernel's sockets: a tmpfs of their own too
# What the kernel can make the grader hold: each of the grader's sockets queues at most this many messages
# (ZMQ's receive high-water mark), each at most the manager's `message_bytes` on shell and IOPub, and at most
# SMALL_MESSAGE_BYTES on stdin, control and heartbeat (small replies, some of which nothing reads).
QUEUED_MESSAGES = 4
MESSAGE_BYTES = 32 * 2**20
SMALL_MESSAGE_BYTES = 2**20
# The grader's variables a kernel may see (everything else, tokens and passwords included, stays out).
PASSED_THROUGH = ("LANG", "LC_ALL", "LC_CTYPE", "TZ", "COURSE_DEVICE", "COURSE_PLAIN_QUIZ", "CUDA_VISIBLE_DEVICES",
                  "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES",
                  "PYTORCH_CUDA_ALLOC_CONF", "CUBLAS_WORKSPACE_CONFIG", "TRITON_INTERPRET")
UNSANDBOXED_WARNING = """
!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
!! GRADING WITHOUT A SANDBOX (--unsandboxed): students' code runs as you, with your network,  !!
!! files and processes. It can read the solutions, change the gradebook and outlive grading.  !!
!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
"""


class SandboxUnavailable(RuntimeError):
    """Kernels cannot be sandboxed here, and unsandboxed grading was not asked for."""


def stop_message(why) -> str:
    return (f"Grading stopped: {why}.\nStudents' code must not run outside a sandbox. "
            "To grade anyway, unsandboxed, pass --unsandboxed (the code then runs as you).")


def problem() -> str | None:
    """Why kernels cannot be sandboxed here (with what to do), or None."""
    return bubblewrap.problem()


def available() -> bool:
    return problem() is None


def require(unsandboxed=False) -> None:
    """Before grading: exit with why and what to do unless kernels can be sandboxed here; with
    `unsandboxed` (the instructor's explicit choice), go on after a loud warning."""
    why = problem()
    if unsandboxed:
        print(UNSANDBOXED_WARNING + (f"(and here no sandbox could start anyway: {why})" if why else ""),
              file=sys.stderr)
    elif why is not None:
        raise SystemExit(stop_message(why))


def secrets_of(root: pathlib.Path) -> list:
    """The course's files a kernel must not see: hidden tests, solutions, gradebook, other work."""
    return [root / name for name in SECRETS if (root / name).exists()]


def fresh_uid() -> int:
    """A user id no account and no other kernel uses; it needs no entry in /etc/passwd."""
    return FIRST_UID + secrets.randbelow(LAST_UID - FIRST_UID)


def kernel_env(workdir, threads=1, course_root=None) -> dict:
    """The kernel's whole environment: a few of the grader's variables (`PASSED_THROUGH`), the
    math libraries held to `threads`, home and caches in the working folder (Triton's included).
    Without a GPU (or with COURSE_DEVICE on the CPU) Triton's interpreter is on from the start:
    a kernel decorated before the notebook's `triton_setup.prepare()` then still runs."""
    env = {name: os.environ[name] for name in PASSED_THROUGH if name in os.environ}
    scripts = os.path.dirname(sys.executable)
    env.update(PATH=f"{scripts}:/usr/local/bin:/usr/bin:/bin", HOME=str(workdir), TMPDIR="/tmp",
               USER=bubblewrap.SANDBOX_USER, LOGNAME=bubblewrap.SANDBOX_USER, LANG=env.get("LANG", "C.UTF-8"),
               IPYTHONDIR=f"{workdir}/.ipython", MPLCONFIGDIR=f"{workdir}/.matplotlib",
               XDG_CACHE_HOME=f"{workdir}/.cache", COURSE_PROGRESS=f"{workdir}/.backprop-course/progress.json",
               PYTHONDONTWRITEBYTECODE="1", PYDEVD_DISABLE_FILE_VALIDATION="1", JUPYTER_PLATFORM_DIRS="1",
               NBGRADER_EXECUTION="autograde")  # as nbgrader sets it: notebooks can tell they are being graded
    triton = f"{workdir}/.triton"  # compiled kernels and launcher stubs (GPU), dumps: all private, writable
    env.update(TRITON_HOME=str(workdir), TRITON_CACHE_DIR=f"{triton}/cache", TRITON_DUMP_DIR=f"{triton}/dump",
               TRITON_OVERRIDE_DIR=f"{triton}/override")
    device = env.get("COURSE_DEVICE", "").strip()
    if not bubblewrap.nvidia_devices() or (device and not device.startswith("cuda")):
        env.setdefault("TRITON_INTERPRET", "1")
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[name] = str(threads)
    if course_root is not None:
        env["COURSE_ROOT"] = str(course_root)
    return env


class Exchange:
    """A folder the grader owns, shared with one kernel: connection file, sockets, calls, answers.

    Names are random and files are created with O_EXCL | O_NOFOLLOW, so nothing a kernel prepares
    can redirect a write of the grader's; the grader reads what a kernel wrote with bounds
    (`autograder.grader.trusted.read_answer`). With `uid` (the kernel's user, when the grader is
    root) the kernel may open the folder but not list or change it, and write only its answers
    (`answers`, where files made `for_kernel` go) and its sockets (`sockets`). Where the grader can
    mount (`capped`), the folder, `answers` and `sockets` are each a tmpfs of their own (`size_mb`,
    `size_mb`, IPC_MB): a kernel that fills its answers, even through a file the grader has unlinked,
    fails only its own later answers, never a request. `private`: the grader's own folder, outside
    the sandbox (the relay's sockets).
    """

    def __init__(self, uid=None, size_mb=EXCHANGE_MB):
        self.uid = uid
        self.folder = pathlib.Path(tempfile.mkdtemp(prefix="course-sandbox-"))
        self.private = pathlib.Path(tempfile.mkdtemp(prefix="course-grader-"))
        self.capped = mount_tmpfs(self.folder, size_mb)  # as root: what a kernel writes here is bounded
        self.folder.chmod(0o711 if uid is not None else 0o700)
        self.answers, self.sockets = self.folder / "answers", self.folder / "ipc"
        for side, side_mb in ((self.answers, size_mb), (self.sockets, IPC_MB)):
            side.mkdir(mode=0o700)
            if self.capped:
                mount_tmpfs(side, side_mb)
        if uid is not None:
            self.answers.chmod(0o711)
            os.chown(self.sockets, uid, uid)
        self.relay = None  # set by the kernel's manager; closed with the folder

    def new_file(self, suffix, data=b"", for_kernel=False, name=None) -> pathlib.Path:
        """A new file with `data`; `for_kernel`: among the answers, owned by the kernel's user, so it can write it."""
        path = (self.answers if for_kernel else self.folder) / (name or f"{secrets.token_hex(16)}{suffix}")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if self.uid is not None:
            os.chown(path, self.uid, self.uid) if for_kernel else path.chmod(0o644)
        return path

    def remove(self):
        if self.relay is not None:
            self.relay.close()
        remove_folder(self.folder)
        shutil.rmtree(self.private, ignore_errors=True)


def mount_tmpfs(folder: pathlib.Path, size_mb: int) -> bool:
    """Mount a tmpfs of `size_mb` on `folder` where this process may (root on Linux); say whether it did."""
    if os.geteuid() != 0 or not sys.platform.startswith("linux"):
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0700,nosuid,nodev,noexec", "tmpfs",
                           str(folder)], capture_output=True)
    return done.returncode == 0


def remove_folder(folder: pathlib.Path) -> None:
    """Remove `folder` and whatever is mounted on it or in it (an exchange's tmpfs)."""
    mounted = sorted((line.split()[1] for line in pathlib.Path("/proc/self/mounts").read_text().splitlines()
                      if _inside(line.split()[1], str(folder))), key=len, reverse=True) \
        if os.path.exists("/proc/self/mounts") else []
    for point in mounted:
        subprocess.run(["umount", "-l", point], capture_output=True)
    shutil.rmtree(folder, ignore_errors=True)


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


class Sandbox:
    """One kernel's sandbox: its user, its shared folder, its working folder and its plan.

    `sandboxed=False` (the instructor's explicit choice) starts the kernel as the grader's user, in
    a private temporary folder, with the same allow-listed environment and nothing else.
    `answer_key` (plain mode only): the one answer-key file the kernel may read.
    """

    def __init__(self, limits, sandboxed=True, answer_key=None, hidden=()):
        self.sandboxed = sandboxed
        self.uid = fresh_uid() if sandboxed and os.geteuid() == 0 else None
        # memory (memfd, shared memory and tmpfs pages included), processes and CPUs, where the grader is root
        cpus = max(1, limits.threads) if limits.cpu_limited else None
        self.cgroup = Cgroup.create(limits.memory_mb, limits.processes, cpus) if sandboxed else None
        self.exchange = Exchange(self.uid)
        self.workdir = HOME if sandboxed else tempfile.mkdtemp(prefix="submission-")
        course_root = pathlib.Path(answer_key).resolve().parents[2] if answer_key else None
        self.env = kernel_env(self.workdir, limits.threads, course_root)
        self.namespace = None
        for name, text in bubblewrap.user_files(self.uid).items():
            self.exchange.new_file("", text.encode(), name=name)
        filter_path = self.exchange.folder / "seccomp.bpf"  # the grader's: the kernel cannot read it
        self.plan = bubblewrap.Plan(
            workdir=self.workdir, exchange=str(self.exchange.folder), env=self.env, uid=self.uid,
            scratch_mb=limits.scratch_mb, processes=limits.processes, file_mb=limits.file_mb,
            data_mb=2 * limits.memory_mb, readable=(str(answer_key),) if answer_key else (),
            hidden=tuple(map(str, hidden)),
            seccomp=str(filter_path) if sandboxed and seccomp.compile_filter(filter_path) else None,
            cpu_seconds=int(limits.submission_seconds * max(1, limits.threads)) + 60 if sandboxed else None)

    def command(self, kernel_cmd) -> list:
        if not self.sandboxed:
            return kernel_cmd
        command = bubblewrap.command(self.plan, kernel_cmd, plain_keys=bool(self.plan.readable))
        return self.cgroup.wrap(command) if self.cgroup is not None else command

    def out_of_memory(self) -> bool:
        """Whether the control group's memory limit ended a process of this sandbox."""
        return self.cgroup is not None and self.cgroup.oom_killed()

    def note_namespace(self, pid) -> None:
        """Remember the PID namespace of the sandbox started as process `pid` (bwrap's child is its
        init). Never the grader's own: `leftovers` would then take every process for the sandbox's."""
        own = os.readlink("/proc/self/ns/pid")
        deadline = time.monotonic() + 5
        while self.sandboxed and self.namespace is None and time.monotonic() < deadline:
            with contextlib.suppress(psutil.Error, OSError):
                children = psutil.Process(pid).children()
                if children:
                    namespace = os.readlink(f"/proc/{children[0].pid}/ns/pid")
                    if namespace == own:
                        raise RuntimeError("the kernel's sandbox has no PID namespace of its own")
                    self.namespace = namespace
                    return
            time.sleep(0.005)

    def leftovers(self) -> list:
        """Processes of this sandbox still alive (its own user's, or in its own PID namespace);
        never this process or its parents."""
        found, spared = [], {os.getpid(), *(p.pid for p in psutil.Process().parents())}
        for process in psutil.process_iter(["uids", "status"]):
            if process.pid in spared:
                continue
            with contextlib.suppress(psutil.Error, OSError):
                if process.info["status"] == psutil.STATUS_ZOMBIE:
                    continue
                mine = self.uid is not None and process.info["uids"].real == self.uid
                if not mine and self.namespace is not None:
                    mine = os.readlink(f"/proc/{process.pid}/ns/pid") == self.namespace
                if mine:
                    found.append(process)
        return found

    def end(self, patience=3.0) -> int:
        """After the kernel: wait briefly for its processes to be gone, kill any left; return how many were."""
        deadline = time.monotonic() + patience
        left = self.leftovers() if self.sandboxed else []
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            left = self.leftovers()
        for process in left:
            with contextlib.suppress(psutil.Error, OSError):
                process.send_signal(signal.SIGKILL)
        if self.cgroup is not None:
            left += [None] * self.cgroup.remove()  # whatever escaped the namespace's count
            self.cgroup = None
        self.exchange.remove()
        if not self.sandboxed:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return len(left)


class SandboxedKernelManager(AsyncKernelManager):
    """A kernel manager whose kernel starts in `sandbox` and talks through Unix sockets there.

    The grader's sockets (its clients' and its own control socket) reach the kernel's through a
    `relay.Relay`, which cuts a connection on which the kernel sends a message over `message_bytes`
    (shell and IOPub; SMALL_MESSAGE_BYTES on the others), all its frames together, before the
    grader has assembled it; each of the grader's sockets then queues at most QUEUED_MESSAGES of
    them, so a kernel can make the grader hold a bounded amount, whatever it sends."""

    def __init__(self, *args, sandbox, message_bytes=MESSAGE_BYTES, **kwargs):
        super().__init__(*args, **kwargs)
        self.sandbox, self.message_bytes = sandbox, message_bytes
        self.transport = "ipc"
        self.connection_file = str(sandbox.exchange.folder / "kernel.json")
        self.ip = str(sandbox.exchange.sockets / "k")  # where the kernel binds; the grader connects to the relay
        self.relay = None
        self.context.setsockopt(zmq.RCVHWM, QUEUED_MESSAGES)  # its own control socket, made after this

    def client(self, **kwargs):
        kc = super().client(**kwargs)
        kc.context.setsockopt(zmq.RCVHWM, QUEUED_MESSAGES)  # applies to the channels' sockets, all made after this
        return kc

    async def _async_launch_kernel(self, kernel_cmd, **kw):
        uid = self.sandbox.uid
        if uid is not None:  # the kernel reads it through its group; only the grader may change it
            os.chown(self.connection_file, -1, uid)
            os.chmod(self.connection_file, 0o640)
        kw["env"] = {"PATH": "/usr/bin:/bin"} if self.sandbox.sandboxed else self.sandbox.env
        kw["cwd"] = str(self.sandbox.exchange.folder) if self.sandbox.sandboxed else self.sandbox.workdir
        launched = await super()._async_launch_kernel(self.sandbox.command(kernel_cmd), **kw)
        try:
            self.sandbox.note_namespace(self.provisioner.process.pid)
            channels = {name: (getattr(self, f"{name}_port"), self.message_bytes if name in ("shell", "iopub") else
                               min(self.message_bytes, SMALL_MESSAGE_BYTES))
                        for name in ("shell", "iopub", "stdin", "control", "hb")}
            self.relay = self.sandbox.exchange.relay = relay.Relay(self.sandbox.exchange.private, self.ip, channels)
        except BaseException:
            self.provisioner.process.kill()
            raise
        self.ip = self.relay.address
        return launched

    async def _async_cleanup_resources(self, restart=False):
        await super()._async_cleanup_resources(restart=restart)
        if self.relay is not None:
            self.relay.close()

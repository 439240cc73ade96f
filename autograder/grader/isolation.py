"""Keep a submission's kernel away from the grader's files and from other submissions.

When the grader runs as root on Linux (a container, CI, a grading server), every kernel is
started by `autograder.grader.jail`: in a mount namespace of its own, where the course's secrets
(solutions, hidden tests, the gradebook, other students' work) are covered by empty mounts, as
a fresh user id with no groups, in a working folder only it can enter. So a kernel can neither
read nor write them, and kernels of different students cannot see each other. Elsewhere a
kernel runs as the grader's own user and can reach whatever that user can: the README says so.

Files the grader and a kernel exchange live in a folder the grader owns (`Exchange`): a kernel
can read and answer the calls meant for it, but cannot plant links or swap files there.
"""
import functools
import json
import os
import pathlib
import secrets
import shutil
import subprocess
import sys
import tempfile

from jupyter_client.manager import AsyncKernelManager

# Top-level entries of a course directory that a kernel must not read or write.
SECRETS = ("solutions", "source", "submitted", "autograded", "feedback", "reports", "tests", ".git",
           "gradebook.db", "grades.csv")
FIRST_UID, LAST_UID = 1_000_000, 2_000_000_000  # far above any real account's id


def available() -> bool:
    """Whether kernels can be jailed here: root on Linux, and a trial kernel-less jail works."""
    return sys.platform == "linux" and os.geteuid() == 0 and _trial_jail_works()


def fresh_uid() -> int:
    """A user id no account and no other kernel uses; it needs no entry in /etc/passwd."""
    return FIRST_UID + secrets.randbelow(LAST_UID - FIRST_UID)


def _needed_paths() -> set:
    """Where this Python, its libraries and the autograder package live."""
    paths = {sys.executable, sys.prefix, sys.base_prefix, str(pathlib.Path(__file__).parent), *sys.path}
    return {os.path.realpath(p) for p in paths if p and os.path.exists(p)}


def reachable_plan() -> dict:
    """{folder others cannot enter: [its entries a kernel needs]}, for `autograder.grader.jail`."""
    plan = {}
    for path in _needed_paths():
        parts = pathlib.PurePath(path).parts
        for depth in range(2, len(parts)):
            folder = os.path.join(*parts[:depth])
            if not os.stat(folder).st_mode & 0o001:
                plan.setdefault(folder, set()).add(parts[depth])
                break
    return {folder: sorted(entries) for folder, entries in plan.items()}


def jail_plan(uid, hidden=()) -> dict:
    return {"uid": uid, "hide": [str(p) for p in hidden], "reach": reachable_plan()}


def jailed(command, plan) -> list:
    """The kernel command, started through jail.py: run as a script, with the standard library only
    (-I -S), so that the launcher does not import the package (and torch) before the kernel does."""
    return [sys.executable, "-I", "-S", str(pathlib.Path(__file__).with_name("jail.py")), json.dumps(plan), "--", *command]


@functools.cache
def _trial_jail_works() -> bool:
    with tempfile.TemporaryDirectory() as folder:
        os.chmod(folder, 0o777)
        probe = jailed([sys.executable, "-c", "import autograder.checks"], jail_plan(fresh_uid()))
        done = subprocess.run(probe, cwd=folder, capture_output=True, text=True)
    if done.returncode != 0:
        print(f"note: kernels cannot be isolated here, so they run as this user:\n{done.stderr[-500:]}",
              file=sys.stderr)
    return done.returncode == 0


def secrets_of(root: pathlib.Path) -> list:
    """The course's files a kernel must not see: hidden tests, solutions, gradebook, other work."""
    return [root / name for name in SECRETS if (root / name).exists()]


def prepare_workdir(workdir, uid) -> None:
    """Give the kernel's working folder to its user, closed to everyone else."""
    if uid is not None:
        os.chown(workdir, uid, uid)
        os.chmod(workdir, 0o700)


def kernel_env(env: dict, workdir) -> dict:
    """Home and cache folders inside the kernel's own working folder."""
    home = pathlib.Path(workdir)
    return {**env, "HOME": str(home), "IPYTHONDIR": str(home / ".ipython"),
            "MPLCONFIGDIR": str(home / ".matplotlib"), "XDG_CACHE_HOME": str(home / ".cache")}


class Exchange:
    """A folder the grader owns, for connection files and call requests and answers.

    Names are random and files are created with O_EXCL | O_NOFOLLOW, so nothing a submission
    prepares in advance can redirect a write of the grader's.
    """

    def __init__(self, uid=None):
        self.uid = uid
        self.folder = pathlib.Path(tempfile.mkdtemp(prefix="course-exchange-"))
        self.folder.chmod(0o711 if uid is not None else 0o700)  # kernels may open, not list

    def new_file(self, suffix, data=b"", for_kernel=False) -> pathlib.Path:
        """A new file with `data`; `for_kernel`: owned by the kernel's user, so it can write it."""
        path = self.folder / f"{secrets.token_hex(16)}{suffix}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if self.uid is not None:
            os.chown(path, self.uid, self.uid) if for_kernel else path.chmod(0o644)
        return path

    def remove(self):
        shutil.rmtree(self.folder, ignore_errors=True)


class IsolatedKernelManager(AsyncKernelManager):
    """Starts the kernel through `autograder.grader.jail` with `plan` (or plainly without one), with
    its connection file in `exchange`."""

    def __init__(self, *args, plan=None, exchange=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.plan, self.exchange = plan, exchange
        if exchange is not None:
            self.connection_file = str(exchange.folder / f"kernel-{secrets.token_hex(16)}.json")

    async def _async_launch_kernel(self, kernel_cmd, **kw):
        if self.plan is not None:
            os.chown(self.connection_file, self.plan["uid"], self.plan["uid"])
            kernel_cmd = jailed(kernel_cmd, self.plan)
        return await super()._async_launch_kernel(kernel_cmd, **kw)

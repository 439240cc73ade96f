"""Memory, process and CPU limits a kernel cannot step around: a control group per sandbox.

The memory watch (`autograder.grader.sandbox.MemoryWatch`) polls the resident memory of a kernel's
processes, and a kernel once held 2 GB in memfd files under a 1.5 GB limit: pages of memfd files,
shared memory and tmpfs are nobody's resident set. A control group counts every page its processes
charge, those included, and the kernel's out-of-memory killer enforces the limit at once; pids.max
bounds the processes it can start. CPU: each `setsid` child of a kernel got a scheduler autogroup
of its own, so a kernel spinning 240 processes took as many shares of the CPU from the kernels
graded beside it; a CPU quota holds all its processes together to `cpus` CPUs, and a weight gives
it the share of a busy machine that those CPUs are worth. Where the grader is root on Linux, each
sandbox gets one: cgroup v2 (`memory.max`, `memory.swap.max`, `pids.max`, `cpu.max`, `cpu.weight`)
where the unified hierarchy has the memory and pids controllers, else v1 (`memory.limit_in_bytes`,
`memory.memsw.limit_in_bytes`, `pids.max`, the cpu controller's `cpu.cfs_quota_us` and
`cpu.shares`, and cpuacct to count the CPU time used). Where the cpu controller is missing, memory
and processes are limited all the same and CPU is not. Anywhere else `create` returns None and the
memory watch stays the only limit.
"""
import contextlib
import os
import pathlib
import secrets
import signal
import sys
import time

ROOT = pathlib.Path("/sys/fs/cgroup")
OWN = pathlib.Path("/proc/self/cgroup")  # the grader's own groups, under which it makes the kernels' (tests: a fake)
PERIOD_US = 100_000  # the CPU quota's period: a group may run `cpus` times this in each
PREFIX = "course-sandbox-"
# A class run's token, set by the grader for its workers (autograder.grader.classgrade): every group they
# make carries it, so that the run can remove what a worker that ended left behind (its spare kernels').
RUN_ENV_VAR = "COURSE_GRADE_RUN"


def _own_paths() -> dict:
    """{controller: this process's cgroup path} from /proc/self/cgroup ("" for the unified hierarchy)."""
    paths = {}
    for line in OWN.read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            paths[controller] = path
    return paths


def _write(path: pathlib.Path, value) -> None:
    path.write_text(f"{value}\n")


def _v1_parent(own: dict, controller: str):
    """This process's group in `controller`'s v1 hierarchy, or None where that is not mounted under ROOT.
    Resolved: controllers that share a hierarchy (cpu and cpuacct often do, `cpu` and `cpuacct` then
    being links to `cpu,cpuacct`) share one folder."""
    hierarchy = ROOT / controller
    if controller not in own or not hierarchy.is_dir():
        return None
    return hierarchy.resolve() / own[controller].lstrip("/")


class Cgroup:
    """One sandbox's control group(s): made with its limits, joined by the kernel's first process
    (`wrap`), read after a death (`oom_killed`), emptied and removed (`remove`)."""

    def __init__(self, memory_mb: int, processes: int, cpus: int | None = None):
        run = os.environ.get(RUN_ENV_VAR, "")
        self.name = f"{PREFIX}{run + '-' if run else ''}{secrets.token_hex(6)}"
        own, limit = _own_paths(), memory_mb * 2**20
        unified = ROOT / own.get("", "/").lstrip("/")
        self.folders = []  # the memory controller's first (`oom_killed`)
        try:
            control = unified / "cgroup.subtree_control"
            if control.exists() and {"memory", "pids"} <= set(control.read_text().split()):
                if cpus and "cpu" not in control.read_text().split():
                    with contextlib.suppress(OSError):  # refused where the cpu controller is not ours to enable
                        _write(control, "+cpu")
                self.version, folder = 2, self._made(unified)
                _write(folder / "memory.max", limit)
                if (folder / "memory.swap.max").exists():
                    _write(folder / "memory.swap.max", 0)
                _write(folder / "pids.max", processes)
                if (folder / "memory.oom.group").exists():  # an OOM kill ends the whole group, kernel included
                    _write(folder / "memory.oom.group", 1)
                if cpus and "cpu" in control.read_text().split():
                    _write(folder / "cpu.weight", min(100 * cpus, 10_000))  # 100 is one CPU's worth (the default)
                    _write(folder / "cpu.max", f"{cpus * PERIOD_US} {PERIOD_US}")
            else:
                self.version = 1
                parents = {c: _v1_parent(own, c) for c in ("memory", "pids", "cpu", "cpuacct")}
                if parents["memory"] is None or parents["pids"] is None:
                    raise FileNotFoundError(f"no memory and pids hierarchies under {ROOT}")
                memory, pids = self._made(parents["memory"]), self._made(parents["pids"])
                _write(memory / "memory.limit_in_bytes", limit)
                if (memory / "memory.memsw.limit_in_bytes").exists():  # no escape into swap
                    _write(memory / "memory.memsw.limit_in_bytes", limit)
                _write(pids / "pids.max", processes)
                if cpus and parents["cpu"] is not None:
                    cpu = self._made(parents["cpu"])
                    _write(cpu / "cpu.shares", min(1024 * cpus, 262_144))  # 1024 is one CPU's worth (the default)
                    _write(cpu / "cpu.cfs_period_us", PERIOD_US)
                    with contextlib.suppress(OSError):  # v1 refuses more than a parent's quota: that one bounds it
                        _write(cpu / "cpu.cfs_quota_us", cpus * PERIOD_US)
                if parents["cpuacct"] is not None:
                    self._made(parents["cpuacct"])  # counts its CPU time (`cpu_seconds`), as v2's cpu.stat does
        except BaseException:
            self.remove()
            raise

    def _made(self, parent: pathlib.Path) -> pathlib.Path:
        """The group's folder under `parent`, made unless another controller's made it already."""
        folder = parent / self.name
        if folder not in self.folders:
            folder.mkdir()
            self.folders.append(folder)
        return folder

    @classmethod
    def create(cls, memory_mb: int, processes: int, cpus: int | None = None):
        """A control group with these limits (`cpus`: how many CPUs its processes may use together;
        None: no CPU limit), or None where none can be made (not root, not Linux, no writable memory
        and pids controllers)."""
        if os.geteuid() != 0 or not sys.platform.startswith("linux"):
            return None
        try:
            return cls(memory_mb, processes, cpus)
        except (OSError, KeyError, ValueError):
            return None

    def wrap(self, command: list) -> list:
        """`command` run by a shell that first moves itself into the group(s): everything the kernel
        starts is in them from its first instruction."""
        joins = "".join(f'echo $$ > "${i}" && ' for i in range(1, len(self.folders) + 1))
        script = f'{joins}shift {len(self.folders)} && exec "$@"'
        return ["/bin/sh", "-c", script, "sh", *(str(f / "cgroup.procs") for f in self.folders), *command]

    def oom_killed(self) -> bool:
        """Whether the out-of-memory killer ended a process of the group."""
        memory = self.folders[0]
        events = memory / ("memory.events" if self.version == 2 else "memory.oom_control")
        try:
            fields = dict(line.split() for line in events.read_text().splitlines() if len(line.split()) == 2)
        except OSError:
            return False
        return int(fields.get("oom_kill", 0)) > 0

    def cpu_seconds(self) -> float:
        """CPU time the group's processes have used so far (v2 `cpu.stat`, v1 `cpuacct.usage`)."""
        if self.version == 2:
            stat = dict(line.split() for line in (self.folders[0] / "cpu.stat").read_text().splitlines())
            return int(stat["usage_usec"]) / 1e6
        [usage] = [folder / "cpuacct.usage" for folder in self.folders if (folder / "cpuacct.usage").exists()]
        return int(usage.read_text()) / 1e9

    def processes(self) -> list:
        found = set()
        for folder in self.folders:
            try:
                found |= {int(pid) for pid in (folder / "cgroup.procs").read_text().split()}
            except OSError:
                pass
        return sorted(found)

    def remove(self, patience=3.0) -> int:
        """Kill whatever still runs in the group, then remove it; return how many processes were killed."""
        killed, deadline = set(), time.monotonic() + patience
        while (left := self.processes()) and time.monotonic() < deadline:
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.add(pid)
                except OSError:
                    pass
            time.sleep(0.02)
        for folder in reversed(self.folders):
            for _ in range(50):
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # busy for a moment after its last process ends
                    time.sleep(0.02)
        return len(killed)


def groups_of_run(run: str) -> list:
    """The folders of every group a class run made (its token in their names), wherever they are."""
    if not run or not ROOT.is_dir():
        return []
    return sorted(ROOT.rglob(f"{PREFIX}{run}-*"))


def remove_run(run: str) -> int:
    """Kill what still runs in a class run's groups and remove them; return how many groups there were."""
    folders = groups_of_run(run)
    leftover = Cgroup.__new__(Cgroup)
    leftover.folders, leftover.version = folders, 2 if (ROOT / "cgroup.controllers").exists() else 1
    leftover.remove()
    return len(folders)

"""Start a kernel as an unprivileged user that cannot see the course's secrets (Linux, as root).

Run as `python -I -S .../autograder/grader/jail.py '<json plan>' -- <kernel command>` by the grader (see
autograder/grader/isolation.py). In a mount namespace of its own, it
1. hides each path of `hide` (an empty tmpfs over a folder, an empty file over a file);
2. makes Python reachable where it lives under a folder other users cannot enter (e.g. a
   pyenv in /root): that folder is covered by a tmpfs holding only the needed entries;
3. drops to `uid` (no groups), then replaces itself with the kernel.
Nothing here imports more than the standard library, so kernels start quickly.
"""
import ctypes
import json
import os
import sys
import tempfile

CLONE_NEWNS = 0x00020000
MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 4096, 8192, 16384, 1 << 18

_libc = ctypes.CDLL(None, use_errno=True)


def _call(name, *args):
    if getattr(_libc, name)(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}{args}: {os.strerror(err)}")


def mount(source, target, fstype=None, flags=0, options=None):
    encode = (lambda s: None if s is None else os.fsencode(s))
    _call("mount", encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(options))


def reach(folder, entries):
    """Cover `folder` with a tmpfs that others may enter, holding only `entries` (bind mounts)."""
    holder = tempfile.mkdtemp(prefix="jail-")
    kept = []
    for i, name in enumerate(entries):
        source, spot = os.path.join(folder, name), os.path.join(holder, str(i))
        os.mkdir(spot)
        mount(source, spot, flags=MS_BIND | MS_REC)
        kept.append((name, spot, os.path.isdir(source)))
    mount("tmpfs", folder, "tmpfs", 0, "mode=0755,size=64k")
    for name, spot, is_dir in kept:
        target = os.path.join(folder, name)
        os.mkdir(target) if is_dir else open(target, "w").close()
        mount(spot, target, flags=MS_MOVE)
        os.rmdir(spot)
    os.rmdir(holder)


def hide(path):
    """Cover a folder with an empty tmpfs, a file with an empty one: no one but root may open them."""
    if os.path.isdir(path):
        mount("tmpfs", path, "tmpfs", 0, "mode=0000,size=4k")
    elif os.path.exists(path):
        fd, blank = tempfile.mkstemp(prefix="jail-")
        os.close(fd)
        os.chmod(blank, 0)
        mount(blank, path, flags=MS_BIND)
        os.unlink(blank)


def main(argv):
    plan, command = json.loads(argv[1]), argv[3:]
    _call("unshare", CLONE_NEWNS)
    mount(None, "/", flags=MS_REC | MS_PRIVATE)  # nothing mounted here leaks out
    for folder, entries in plan["reach"].items():
        reach(folder, entries)
    for path in plan["hide"]:
        hide(path)
    os.setgroups([])
    os.setgid(plan["uid"])
    os.setuid(plan["uid"])
    os.execv(command[0], command)


if __name__ == "__main__":
    main(sys.argv)

"""A seccomp filter for the sandbox: the system calls a notebook never needs and an escape always does.

Running as root, a kernel once created user, mount and network namespaces inside its sandbox, took
every capability in them and mounted a 12 GB tmpfs of its own. bubblewrap's `--disable-userns`
needs a user namespace of the sandbox's own, which the root path does not make, so a filter refuses
what Docker's and Flatpak's default profiles refuse: new namespaces (`unshare`, `setns`, `clone` with
a CLONE_NEW* flag; `clone3`, whose flags seccomp cannot read, answers ENOSYS so that the C library
falls back to `clone`), mounts, keyrings, `bpf`, `ptrace`, `perf_event_open`, kernel modules,
`kexec`, `reboot`, `userfaultfd`. Refused calls fail with EPERM; everything else is allowed.

The filter is compiled by libseccomp (the library Docker, Podman and systemd use; Debian's
`libseccomp2`) through ctypes, for this machine's architecture, and handed to bubblewrap
(`--seccomp FD`) as a BPF program in a file. Where libseccomp cannot be loaded, `compile_filter`
returns None and the sandbox says so (`bubblewrap.problem`).
"""
import ctypes
import ctypes.util
import errno
import functools
import os

REFUSED = ("unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "fsopen", "fsmount", "fsconfig", "fspick",
           "move_mount", "open_tree", "mount_setattr", "keyctl", "add_key", "request_key", "bpf", "ptrace",
           "process_vm_readv", "process_vm_writev", "perf_event_open", "open_by_handle_at", "name_to_handle_at",
           "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot", "swapon",
           "swapoff", "acct", "userfaultfd", "lookup_dcookie", "quotactl", "syslog", "vhangup")
# clone's flags that make a namespace (linux/sched.h)
CLONE_NEW = {"CLONE_NEWNS": 0x00020000, "CLONE_NEWCGROUP": 0x02000000, "CLONE_NEWUTS": 0x04000000,
             "CLONE_NEWIPC": 0x08000000, "CLONE_NEWUSER": 0x10000000, "CLONE_NEWPID": 0x20000000,
             "CLONE_NEWNET": 0x40000000}  # CLONE_NEWTIME (0x80) is clone3's only: clone's low byte is a signal

_ALLOW = 0x7FFF0000  # SCMP_ACT_ALLOW
_MASKED_EQ = 7  # SCMP_CMP_MASKED_EQ


def _errno(number):
    return 0x00050000 | (number & 0xFFFF)  # SCMP_ACT_ERRNO(number)


class _ArgCmp(ctypes.Structure):  # struct scmp_arg_cmp
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


@functools.cache
def _library():
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError:
        return None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                           ctypes.POINTER(_ArgCmp)]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    return lib


def available() -> bool:
    return _library() is not None


def _refuse(lib, ctx, name, number=errno.EPERM, conditions=()):
    syscall = lib.seccomp_syscall_resolve_name(name.encode())
    if syscall < 0:  # not a system call of this architecture (some are new, some are x86 only)
        return
    array = (_ArgCmp * len(conditions))(*conditions) if conditions else None
    if lib.seccomp_rule_add_array(ctx, _errno(number), syscall, len(conditions), array) != 0:
        raise OSError(f"libseccomp refused a rule for {name}")


def compile_filter(path) -> bool:
    """Write the filter, as a BPF program for bubblewrap's --seccomp, to the new file `path`; False
    where libseccomp is missing."""
    lib = _library()
    if lib is None:
        return False
    ctx = lib.seccomp_init(_ALLOW)
    if not ctx:
        raise OSError("libseccomp could not start a filter")
    try:
        for name in REFUSED:
            _refuse(lib, ctx, name)
        for flag in CLONE_NEW.values():  # clone(flags, ...): refused when any namespace flag is set
            _refuse(lib, ctx, "clone", conditions=[_ArgCmp(0, _MASKED_EQ, flag, flag)])
        _refuse(lib, ctx, "clone3", number=errno.ENOSYS)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            if lib.seccomp_export_bpf(ctx, fd) != 0:
                raise OSError("libseccomp could not write the filter")
        finally:
            os.close(fd)
    finally:
        lib.seccomp_release(ctx)
    return True

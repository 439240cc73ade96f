"""`backprop-course grade` on a class with broken and hostile submissions.

One class run (notebook 01) holds every case. Submissions that run answer perfectly except for one
exercise (relu_grad, 1 point), where each misbehaves in its own way: that exercise must score 0
(or full marks where the misbehaviour is harmless), every other exercise and student is graded
normally. Submissions that attack the grader (its files, the install checkout, its network, its
environment, its memory, the machine after grading) meet the sandbox and say what they met.
Submissions whose file or zip is broken or hostile score 0 with the reason in failures.csv,
without stopping the run; tampered nbgrader metadata is undone and earns nothing. Every expected
score is checked in scores.csv and in `nbgrader export`, and `ps` is clean of every submission's
processes afterwards.
"""
import contextlib
import csv
import io
import os
import pathlib
import re
import secrets
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import types
import typing
import zipfile

import course
import nbformat
import psutil
import pytest
import tqdm
from conftest import require
from test_nbgrader_e2e import submission

from autograder.grader import (
    cgroup,
    classgrade,
    cluster,
    grading_task,
    isolation,
    recording,
    report,
    sanitize,
    submissions,
)
from autograder.grader.sandbox import Limits

NAME, VICTIM = "01_chain_rule", "relu_grad"
TOTAL = 12
GOOD = "def relu_grad(x):\n    return (x > 0).to(x.dtype)"
SECRET = "root:$6$do-not-print-me$"  # the first line of a file a submission links to
SCRATCH_MB = 64  # each sandbox's /tmp, /dev/shm and working folder
# A cell's time limit: a ceiling for any cell on a loaded machine (2 cores at load 16-23 took 10.6 s to start
# a kernel), never a measurement. Only an endless loop reaches it, and says so.
CELL_SECONDS = 120

# A wrong answer behind patched comparisons: in the kernel, every check would pass.
CHEAT = """import numpy, torch
import autograder.checks
autograder.checks.expect_close = lambda *a, **k: None
autograder.checks.check_cases = lambda *a, **k: None
torch.allclose = lambda *a, **k: True
torch.testing.assert_close = lambda *a, **k: None
numpy.allclose = lambda *a, **k: True
torch.Tensor.any = lambda self, *a, **k: False
def relu_grad(x):
    return x"""

ANSWERS = {  # student -> (relu_grad's cell, expected total)
    "perfect": (GOOD, 12),
    "blank": (None, 0),
    "endless_loop_ignoring_interrupts": (
        "def relu_grad(x):\n    while True:\n        try:\n            while True:\n                pass\n"
        "        except BaseException:\n            pass", 11),
    "os_exit": ("def relu_grad(x):\n    import os\n    os._exit(1)", 11),
    "sys_exit": ("def relu_grad(x):\n    import sys\n    sys.exit(0)", 11),
    "memory_bomb": ("def relu_grad(x):\n    hoard = []\n    while True:\n"
                    "        hoard.append(bytearray(100 * 2**20))", 11),
    "output_flood": ("def relu_grad(x):\n    for _ in range(20_000):\n        print('spam' * 50)\n"
                     "    return (x > 0).to(x.dtype)", 11),
    "wrong_type": ("def relu_grad(x):\n    return (x > 0).tolist()", 11),
    "nan": ("def relu_grad(x):\n    return x * float('nan')", 11),
    "wrong_shape": ("def relu_grad(x):\n    return (x > 0).to(x.dtype)[None]", 11),
    "wrong_dtype": ("def relu_grad(x):\n    return x > 0", 11),
    "wrong_device": ("def relu_grad(x):\n    return (x > 0).to(x.dtype).to('meta')", 11),
    "warnings_on_stderr": ("import sys, warnings\ndef relu_grad(x):\n    warnings.warn('noisy')\n"
                           "    print('chatter', file=sys.stderr)\n    return (x > 0).to(x.dtype)", 12),
    "renamed_function": ("def relu_gradient(x):\n    return (x > 0).to(x.dtype)", 11),
    # patches at top level, outside every answer: powerless (the by-hand exercises are graded before they run)
    "patches_the_checks": (CHEAT, 11),
    "patches_builtins": ("import builtins\nbuiltins.all = lambda *a: True\nbuiltins.any = lambda *a: False\n"
                         "builtins.abs = lambda x: 0\nbuiltins.max = lambda *a, **k: 0\n"
                         "def relu_grad(x):\n    return x", 11),
    "huge_exception_message": ("def relu_grad(x):\n    raise ValueError('x' * 5_000_000)", 11),
}
# Submissions that attack the grader: its files and those of the checkout the package is installed
# from, its network, its environment, its memory, and the machine after grading. In each cell
# {root} is the class folder and {token} a word unique to the run, marking every file and process
# the submission makes. student -> (relu_grad's cell, expected total, what relu_grad's message
# must match among the errors of relu_grad's grade cell: the judge refuses most of these answers, which then run
# after every other by-hand exercise, so the sandbox still meets them). Every one runs only in the sandbox:
# without one the class is not graded at all.
INTRUDERS = {
    "copies_the_solution": (
        "import json\n"
        "def relu_grad(x):\n"
        "    nb = json.load(open('{root}/solutions/01_chain_rule/01_chain_rule.ipynb'))\n"
        "    scope = {}\n"
        "    exec([''.join(c['source']) for c in nb['cells'] if 'def relu_grad' in ''.join(c['source'])][0], scope)\n"
        "    return scope['relu_grad'](x)", 11, "FileNotFoundError|PermissionError"),
    "reads_the_gradebook": ("def relu_grad(x):\n    open('{root}/gradebook.db', 'rb').read()\n"
                            "    return (x > 0).to(x.dtype)", 11, "FileNotFoundError|PermissionError"),
    "erases_the_gradebook": ("def relu_grad(x):\n    open('{root}/gradebook.db', 'wb').close()\n"
                             "    return (x > 0).to(x.dtype)", 11, "FileNotFoundError|PermissionError"),
    "overwrites_another_student": (
        "def relu_grad(x):\n    open('{root}/submitted/perfect/01_chain_rule/01_chain_rule.ipynb', 'w').write('{}')\n"
        "    return (x > 0).to(x.dtype)", 11, "FileNotFoundError|PermissionError"),
    # The checkout the grader runs from holds every notebook's solution, whatever course is graded.
    "copies_from_the_install_checkout": (
        "import json, pathlib\n"
        "import autograder.checks\n"
        "def relu_grad(x):\n"
        "    checkout = pathlib.Path(autograder.checks.__file__).resolve().parents[2]\n"
        "    nb = json.load(open(checkout / 'solutions/01_chain_rule/01_chain_rule.ipynb'))\n"
        "    scope = {}\n"
        "    exec([''.join(c['source']) for c in nb['cells'] if 'def relu_grad' in ''.join(c['source'])][0], scope)\n"
        "    return scope['relu_grad'](x)", 11,
        f"FileNotFoundError.*'{re.escape(str(course.ROOT))}/solutions/01_chain_rule/01_chain_rule.ipynb'"),
    # Every loopback port (the local Dask scheduler's among them, wherever it listens), every
    # listener in /proc/net/tcp, an outside address; it reports what answered other than its own.
    "reaches_for_the_network": (
        "import os, socket\n"
        "def relu_grad(x):\n"
        "    listening = {}  # port -> its owner's uid\n"
        "    for table in ('/proc/net/tcp', '/proc/net/tcp6'):\n"
        "        for line in open(table).readlines()[1:]:\n"
        "            fields = line.split()\n"
        "            if fields[3] == '0A':\n"
        "                listening[int(fields[1].rsplit(':', 1)[1], 16)] = int(fields[7])\n"
        "    reached = []\n"
        "    for host, port in [('127.0.0.1', p) for p in range(1, 65536)] + [('::1', p) for p in listening]:\n"
        "        try:\n"
        "            with socket.create_connection((host, port), timeout=1) as s:\n"
        "                if s.getsockname()[:2] != s.getpeername()[:2] and listening.get(port) != os.getuid():\n"
        "                    reached.append(f'{host}:{port}')\n"
        "        except OSError:\n"
        "            pass\n"
        "    try:\n"
        "        socket.create_connection(('1.1.1.1', 53), timeout=3).close()\n"
        "        outside = 'reached'\n"
        "    except OSError as err:\n"
        "        outside = err.strerror or type(err).__name__\n"
        "    raise ConnectionError(f'services of others reached: {reached}; 1.1.1.1:53: {outside}')", 11,
        r"services of others reached: \[\]; 1\.1\.1\.1:53: Network is unreachable"),
    "reads_the_grader_environment": (
        "import os\n"
        "print(dict(os.environ))\n"
        "def relu_grad(x):\n"
        "    elsewhere = []\n"
        "    for pid in filter(str.isdigit, os.listdir('/proc')):\n"
        "        try:\n"
        "            if b'GRADER_SECRET_TOKEN=' in open(f'/proc/{pid}/environ', 'rb').read():\n"
        "                elsewhere.append(pid)\n"
        "        except OSError:\n"
        "            pass\n"
        "    raise LookupError(f\"GRADER_SECRET_TOKEN={os.environ.get('GRADER_SECRET_TOKEN')}; in other processes: \"\n"
        "                      f'{elsewhere}')", 11, re.escape("GRADER_SECRET_TOKEN=None; in other processes: []")),
    "fills_tmp_and_shm": (
        "def relu_grad(x):\n"
        "    said = []\n"
        "    for folder in ('/tmp', '/dev/shm'):\n"
        "        written = 0\n"
        "        try:\n"
        "            for i in range(64):  # up to 1 GB each, left there\n"
        "                with open(f'{folder}/{token}-{i}', 'wb') as f:\n"
        "                    for _ in range(16):\n"
        "                        f.write(bytes(2**20))\n"
        "                        written += 1\n"
        "            said.append(f'{folder}: {written} MB, never full')\n"
        "        except OSError as err:\n"
        "            said.append(f'{folder}: full after {written} MB ({err.strerror})')\n"
        "    raise OSError('; '.join(said))", 11,
        r"/tmp: full after (\d+) MB \(No space left on device\); /dev/shm: full after (\d+) MB \(No space"),
    "returns_an_expanded_tensor": (  # 8 bytes of storage that would be 2 GB once copied
        "import torch\n"
        "def relu_grad(x):\n"
        "    return torch.ones(1, dtype=torch.float64).expand(250_000_000)", 11,
        "too large to grade: a tensor of shape \\(250000000,\\) has 250,000,000 elements"),
    # A double-forked daemon and `setsid sleep`, both marked with the token; it checks that both
    # run, then answers correctly: harmless while its kernel lives, they must end with it.
    "leaves_daemons_running": (
        "import os, subprocess, sys, time\n"
        "started = []\n"
        "def relu_grad(x):\n"
        "    if not started:\n"
        "        started.append(True)\n"
        "        os.environ['SUBMISSION_MARK'] = '{token}'\n"
        "        subprocess.Popen(['setsid', 'sleep', '3600'])\n"
        "        if os.fork() == 0:\n"
        "            os.setsid()\n"
        "            if os.fork() == 0:\n"
        "                os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(3600)', '{token}'])\n"
        "            os._exit(0)\n"
        "        os.wait()\n"
        "        marked = []\n"
        "        while len(marked) < 2:  # each shows the mark once it has exec'd; the cell's limit bounds the wait\n"
        "            time.sleep(0.01)\n"
        "            marked = []\n"
        "            for pid in filter(str.isdigit, os.listdir('/proc')):\n"
        "                try:\n"
        "                    marked += [pid] if b'{token}' in open(f'/proc/{pid}/environ', 'rb').read() else []\n"
        "                except OSError:\n"
        "                    pass\n"
        "        if len(marked) != 2:\n"
        "            raise RuntimeError(f'{len(marked)} of 2 processes started')\n"
        "    return (x > 0).to(x.dtype)", 11, r"ByHandRule: relu_grad: .* imports os, which an answer may not use"),
    # A sparse tensor whose index is -1: torch.load(weights_only=True) built it, and the first check
    # that touched it ended the worker with "double free or corruption".
    "returns_a_malformed_sparse_tensor": (
        "import torch\n"
        "def relu_grad(x):\n"
        "    n = x.numel()\n"
        "    return torch.sparse_coo_tensor([list(range(n - 1)) + [-1]], torch.ones(n, dtype=x.dtype), (n,),\n"
        "                                   check_invariants=False)", 11, "only dense tensors"),
    # The exchange folder once lived on the host's /tmp with no quota: 2,000 MB in 9 s.
    "floods_the_exchange_folder": (
        "import os, sys\n"
        "def relu_grad(x):\n"
        "    folder = os.path.join(os.path.dirname(sys.argv[sys.argv.index('-f') + 1]), 'ipc')\n"
        "    written = 0\n"
        "    try:\n"
        "        with open(os.path.join(folder, '{token}-flood'), 'wb') as f:\n"
        "            for _ in range(2000):\n"
        "                f.write(bytes(2**20))\n"
        "                f.flush()\n"
        "                written += 1\n"
        "    except OSError as err:\n"
        "        raise OSError(f'exchange: full after {written} MB ({err.strerror})')\n"
        "    raise OSError(f'exchange: {written} MB, never full')", 11, r"exchange: full after \d{1,2} MB"),
    # Pages of memfd files are in no resident set: 2 GB held under a 1.5 GB limit once scored 12/12.
    "hoards_memfd": (
        "import os\n"
        "held = []\n"
        "def relu_grad(x):\n"
        "    for i in range(40):\n"
        "        fd = os.memfd_create(f'm{i}')\n"
        "        os.write(fd, bytes(64 * 2**20))\n"
        "        held.append(fd)\n"
        "    return (x > 0).to(x.dtype)", 11, "used more than 1500 MB of memory"),
    # As root, a kernel made user, mount and network namespaces and mounted a tmpfs of its own.
    "makes_namespaces_and_mounts": (
        "import ctypes, errno, subprocess\n"
        "def relu_grad(x):\n"
        "    libc = ctypes.CDLL(None, use_errno=True)\n"
        "    said = [errno.errorcode.get(ctypes.get_errno(), '?') if libc.unshare(flag) else 'made'\n"
        "            for flag in (0x10000000, 0x00020000, 0x40000000)]\n"
        "    said.append('mounted' if libc.mount(b'none', b'/tmp', b'tmpfs', 0, None) == 0 else\n"
        "                errno.errorcode.get(ctypes.get_errno(), '?'))\n"
        "    raise PermissionError(f'namespaces and mount: {said}')", 11,
        re.escape("namespaces and mount: ['EPERM', 'EPERM', 'EPERM', 'EPERM']")),
    # Forward-mode autograd was not among the guarded doors: a notebook 01 computed by it scored 12/12.
    "uses_forward_mode_autograd": (
        "import torch\n"
        "from torch.autograd.forward_ad import dual_level, make_dual, unpack_dual\n"
        "def relu_grad(x):\n"
        "    with dual_level():\n"
        "        return unpack_dual(torch.relu(make_dual(x, torch.ones_like(x)))).tangent", 11,
        "called autograd|ran autograd's backward kernel"),
    # A kernel can patch the checks its notebook imported (here the guard that refuses autograd), not the
    # private copy that answers the grader's calls; here the patch, outside every answer, never even runs where
    # the by-hand exercises are graded: relu_grad is refused ("called autograd"), the rest keep their points.
    "switches_off_the_autograd_guard": (
        "import contextlib, torch\n"
        "import autograder.checks.student_calls as _sc\n"
        "_sc._autograd_forbidden = lambda e: contextlib.nullcontext()\n"
        "def relu_grad(x):\n"
        "    leaf = x.detach().clone().requires_grad_()\n"
        "    with torch.enable_grad():\n"
        "        torch.relu(leaf).sum().backward()\n"
        "    return leaf.grad", 11, "called autograd"),
}
# What a kernel sends its grader or leaves in the exchange folder: each of these made the grading worker fail
# (the submission "not graded", never its own 0) in a class run. student -> (relu_grad's cell, expected total,
# what relu_grad's errors must match). Each reaches the kernel through IPython, which the by-hand judge refuses
# in relu_grad: it scores 0, its answer run after every other by-hand exercise, and its errors hold what the
# grader met; the last one's hook is part of the answer program, which runs as it loads: a reflection there
# costs every by-hand exercise (total 0).
MESSAGE_ATTACKS = {
    "sends_a_message_twice": (  # jupyter_client's session refused the copy with a ValueError out of nbclient
        "from IPython import get_ipython\n"
        "def relu_grad(x):\n"
        "    _k = get_ipython().kernel\n"
        "    m = _k.session.msg('stream', {'name': 'stdout', 'text': 'x'})\n"
        "    _k.session.send(_k.iopub_socket, m)\n"
        "    _k.session.send(_k.iopub_socket, m)\n"
        "    return (x > 0).to(x.dtype)", 11,
        r"MessageFault: the kernel sent a message the grader cannot read \(ValueError: Duplicate Signature"),
    "sends_100_frames_of_30_mb": (  # each frame under ZMQ's per-frame limit: 3 GB assembled in the worker
        "from IPython import get_ipython\n"
        "def relu_grad(x):\n"
        "    _k = get_ipython().kernel\n"
        "    big = memoryview(bytes(30 * 2**20))\n"
        "    _k.session.send(_k.iopub_socket, 'stream', {'name': 'stdout', 'text': 'x'}, buffers=[big] * 100)\n"
        "    return (x > 0).to(x.dtype)", 11,
        f"MessageFault: the kernel sent a message of more than {isolation.MESSAGE_BYTES:,} bytes"),
    # It keeps each call's answer file open (named in the cell that serves the call) and, from its third call,
    # a thread grows those the grader has unlinked, taking whatever space the grader frees, until the next
    # call is served: that call's request is written while the answers are full (once in the same tmpfs:
    # ENOSPC, and the worker failed).
    "fills_the_answers_it_was_given": (
        "import errno, re, threading\n"
        "from IPython import get_ipython\n"
        "held, full, done, filling = [], threading.Event(), threading.Event(), []\n"
        "def fill():\n"
        "    while not done.is_set():\n"
        "        for f in held[:-1]:  # unlinked by the grader, still open here\n"
        "            try:\n"
        "                f.write(bytes(4096))\n"
        "            except OSError as err:\n"
        "                if err.errno == errno.ENOSPC:\n"
        "                    full.set()\n"
        "def hold(info):\n"
        "    answer = re.findall(r\"'([^']+[.]out)'\", info.raw_cell)\n"
        "    if answer and full.is_set():\n"
        "        done.set()\n"
        "        filling[0].join()\n"
        "        get_ipython().events.unregister('pre_run_cell', hold)\n"
        "        for f in held:\n"
        "            f.close()\n"
        "    elif answer:\n"
        "        held.append(open(answer[0], 'ab', buffering=0))\n"
        "hooked = get_ipython().events.register('pre_run_cell', hold)\n"
        "def relu_grad(x):\n"
        "    assert hooked is None\n"
        "    if len(held) > 2 and not filling:\n"
        "        filling.append(threading.Thread(target=fill, daemon=True))\n"
        "        filling[0].start()\n"
        "        full.wait()\n"
        "    return (x > 0).to(x.dtype)", 0, r"no readable answer came back from your notebook \(it wrote nothing\)"),
}
# Answers that get around a by-hand rule inside the kernel (each scored 12/12 in a class run before the judge,
# issue 28). The judge reads the source in the grader: relu_grad is refused; where its answer patches or
# reflects as the answer program loads, every by-hand exercise of 01 is too (they are all graded where it ran);
# a patch outside every answer is powerless. student -> (relu_grad's cell, expected total, what relu_grad's
# message must match, what its flags must, what every other exercise's message must: None where they keep
# their points).
BY_HAND_ATTACKS = {
    "autograd_through_the_engine": (
        "import torch\n"
        "def relu_grad(x):\n"
        "    leaf = x.detach().clone().requires_grad_()\n"
        "    with torch.enable_grad():\n"
        "        y = torch.relu(leaf).sum()\n"
        "    return torch.autograd.variable.Variable._execution_engine.run_backward(\n"
        "        (y,), (torch.ones_like(y),), False, False, (leaf,), True, False)[0]", 11,
        r"ByHandRule: relu_grad: cell \d+, line 6 .* reaches torch"
        r"\.autograd\.variable\.Variable\._execution_engine, a private part of torch", "_execution_engine", None),
    "switches_off_the_guard_through_the_checks": (
        "import contextlib, torch\n"
        "from autograder import checks\n"
        "checks.student_calls._autograd_forbidden = lambda e: contextlib.nullcontext()\n"
        "def relu_grad(x):\n"
        "    return torch.autograd.grad(torch.relu(x.detach().requires_grad_()).sum(), x)[0]", 11,
        r"ByHandRule: relu_grad: .* reaches torch\.autograd\.grad",
        r"changes autograder\.checks\.student_calls\._autograd_forbidden", None),
    "binds_forward_mode_early": (
        "import torch\n"
        "enter, make, unpack = torch._C._enter_dual_level, torch._VF._make_dual, torch._VF._unpack_dual\n"
        "leave = torch._C._exit_dual_level\n"
        "def relu_grad(x):\n"
        "    level = enter()\n"
        "    try:\n"
        "        return unpack(torch.relu(make(x, torch.ones_like(x), level)), level)[1]\n"
        "    finally:\n"
        "        leave(level=level)", 0, r"reaches torch\._C, a private part of torch", r"reaches torch\._C",
        r"reaches torch\._C"),
    # Its record once made the grader's decode import `autograder.no_such_module`: "not graded", every time.
    "returns_a_record_of_no_module": (
        "import dataclasses\n"
        "@dataclasses.dataclass\n"
        "class Record:\n"
        "    __module__ = 'autograder.no_such_module'\n"
        "    values: list\n"
        "def relu_grad(x):\n"
        "    return Record((x > 0).tolist())", 0, r"sets a class's __module__", r"sets a class's __module__",
        r"sets a class's __module__"),
}
ISOLATED = isolation.available()  # bubblewrap starts here (as root, or in a user namespace)
NO_SANDBOX = f"kernels cannot be sandboxed here, and grading stops without a sandbox: {isolation.problem()}"
SANDBOXED = pytest.mark.needs(ISOLATED, reason=NO_SANDBOX)
EDITS = {  # student -> (how the test cells were tampered with, relu_grad answer, expected total, note)
    "edited_test": ("edit", None, 11, "relu_grad: the locked cell was edited"),
    "deleted_test": ("delete", None, 11, "relu_grad: its cell is missing"),
    "duplicated_test": ("duplicate", GOOD, 12, "repeats 'relu_grad': only the first counts"),
    "reordered_test": ("move_before_answer", GOOD, 12, None),  # by hand: graded after its answer, wherever it is
    "added_grade_cell_1000_points": ("add_grade_cell", GOOD, 12, "claims to be nbgrader cell 'bonus'"),
    "test_cell_made_markdown": ("markdown", GOOD, 12, "relu_grad: turned into a markdown cell"),
    "solution_flipped_to_grade_cell": ("flip_solution", GOOD, 12, "relu_grad_solution: its nbgrader grade, points"),
    "metadata_not_a_dict": ("metadata_string", GOOD, 12, "its nbgrader metadata is a str, not a dict"),
}
BROKEN = {  # student -> (what the file in submitted/ is, the reason failures.csv must give); all score 0
    "empty_file": (b"", "is empty"),
    "truncated_notebook": ("half", "is not a complete notebook"),
    "not_utf8": ("latin1", "is not UTF-8 text (byte 0xe9"),
    "nbformat_5": ("nbformat5", "says it is nbformat 5"),
    "json_but_not_a_notebook": (b'["cells"]', "is JSON but not a notebook"),
    "cells_not_a_list": (b'{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": 7}',
                         "is not a valid notebook"),
    "too_large": ("large", "a notebook may hold"),
    "symlink_to_a_secret": ("symlink", "is a symbolic link: not followed"),
    "misnamed_notebook": ("misnamed", "no 01_chain_rule.ipynb in submitted/misnamed_notebook/01_chain_rule "
                                      "(found: my_chain_rule.ipynb)"),
    "symlinked_folder": ("linked_folder", "submitted/symlinked_folder is a symbolic link: not followed"),
    "folder_as_notebook": ("folder", "is a folder, not a notebook file"),
}
# Student folders whose names would split a row of nbgrader's export: refused, reported, never recorded.
UNSAFE_FOLDERS = ["comma,student", 'quote"student', "new\nline"]
ZIPS = {  # zip file name -> (expected score, the reason if it scores 0 without being graded)
    "zipped student.zip": (12, None),  # a member that climbs out (../../../) is read, never extracted
    "张伟.zip": (12, None),  # a name with no ASCII letter or digit still gives a stable id
    "with_autosave.zip": (12, None),  # .ipynb_checkpoints/01_chain_rule-checkpoint.ipynb (blank) is ignored
    "truncated.zip": (0, "is not a readable zip"),
    "encrypted.zip": (0, "is encrypted"),
    "two_copies.zip": (0, "holds 2 copies of 01_chain_rule.ipynb"),
    "replaces_existing.zip": (0, "would replace the different submitted/replaces_existing/01_chain_rule/"),
    "zip_bomb.zip": (0, "unpacks to 41,943,040 bytes"),
    "misnamed_in_zip.zip": (0, "no 01_chain_rule.ipynb in misnamed_in_zip.zip (found: 01_chain_rule_final.ipynb)"),
    "link_member.zip": (0, "is a symbolic link: not followed"),
    "José Alvarez.zip": (12, None),
    f"{submissions.student_id('José Alvarez')}.zip": (12, None),  # a zip named like José's computed id
}


def perfect_answers():
    solution = course.read(course.solution_path(NAME))
    return {course.nbgrader_meta(c)["grade_id"].removesuffix("_solution"): c.source
            for c in course.solution_cells(solution)}


def _index(cells, grade_id):
    return next(i for i, c in enumerate(cells) if course.nbgrader_meta(c).get("grade_id") == grade_id)


def tamper(nb, how):
    cells = nb.cells
    index, answer = _index(cells, VICTIM), _index(cells, f"{VICTIM}_solution")
    if how == "edit":
        cells[index].source = "pass"
    elif how == "delete":
        del cells[index]
    elif how == "duplicate":
        cells.insert(index + 1, nbformat.from_dict({**cells[index], "id": "copied-test-cell"}))
    elif how == "move_before_answer":
        cells.insert(answer, cells.pop(index))
    elif how == "add_grade_cell":
        cells.append(nbformat.v4.new_code_cell("pass", metadata={"nbgrader": {
            "grade": True, "solution": False, "locked": True, "grade_id": "bonus", "points": 1000,
            "schema_version": 3}}))
    elif how == "markdown":
        cells[index] = nbformat.v4.new_markdown_cell(cells[index].source, metadata=cells[index].metadata)
    elif how == "flip_solution":
        cells[answer].metadata.nbgrader.update(grade=True, points=1000)
    elif how == "metadata_string":
        cells[answer].metadata["nbgrader"] = "solution please"
    return nb


def zip_bytes(members: dict, *, link: str = "", encrypted: bool = False) -> bytes:
    """A zip of {name: bytes}; `link`: that member stored as a symbolic link; `encrypted`: every
    member flagged as encrypted (as a password-protected zip is)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            info = zipfile.ZipInfo(name)
            info.compress_type = zipfile.ZIP_DEFLATED
            if name == link:
                info.external_attr = (stat.S_IFLNK | 0o777) << 16
            z.writestr(info, data)
    data = bytearray(buffer.getvalue())
    if encrypted:
        for signature, offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
            for match in re.finditer(re.escape(signature), bytes(data)):
                data[match.start() + offset] |= 0x1
    return bytes(data)


@contextlib.contextmanager
def terminal_output(into: list):
    """Everything this process and its children write to stdout and stderr while the block runs."""
    sys.stdout.flush(), sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 1), os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush(), sys.stderr.flush()
            os.dup2(saved[0], 1), os.dup2(saved[1], 2)
            os.close(saved[0]), os.close(saved[1])
            sink.seek(0)
            into.append(sink.read().decode("utf-8", "replace"))


def place_broken(root, student, what, released_text, secret_file):
    folder = root / "submitted" / student / NAME
    path = folder / f"{NAME}.ipynb"
    if what == "linked_folder":
        (root / "elsewhere" / NAME).mkdir(parents=True)
        (root / "elsewhere" / NAME / f"{NAME}.ipynb").write_text(released_text)
        (root / "submitted" / student).symlink_to(root / "elsewhere")
        return
    folder.mkdir(parents=True)
    if isinstance(what, bytes):
        path.write_bytes(what)
    elif what == "half":
        path.write_text(released_text[: len(released_text) // 2])
    elif what == "latin1":
        path.write_bytes(released_text.encode().replace(b"chain", b"ch\xe9ain", 1))  # an é in Latin-1
    elif what == "nbformat5":
        path.write_text(released_text.replace('"nbformat": 4', '"nbformat": 5'))
    elif what == "large":
        path.write_bytes(b" " * (submissions.MAX_NOTEBOOK_BYTES + 1))
    elif what == "symlink":
        path.symlink_to(secret_file)
    elif what == "misnamed":
        (folder / "my_chain_rule.ipynb").write_text(released_text)
    elif what == "folder":
        path.mkdir()


def build_zips(folder, root, released, perfect):
    full = nbformat.writes(submission(released, perfect)).encode()
    blank = nbformat.writes(submission(released, {})).encode()
    note = b"not a notebook"
    made = {
        "zipped student.zip": zip_bytes({f"../../../{NAME}.ipynb": full, "notes.txt": note}),
        "张伟.zip": zip_bytes({f"{NAME}.ipynb": full}),
        "with_autosave.zip": zip_bytes({f"work/{NAME}.ipynb": full,
                                        f"work/.ipynb_checkpoints/{NAME}-checkpoint.ipynb": blank}),
        "encrypted.zip": zip_bytes({f"{NAME}.ipynb": full}, encrypted=True),
        "two_copies.zip": zip_bytes({f"{NAME}.ipynb": full, f"v2/{NAME}.ipynb": blank}),
        "replaces_existing.zip": zip_bytes({f"{NAME}.ipynb": blank}),
        "zip_bomb.zip": zip_bytes({f"{NAME}.ipynb": b"0" * 40 * 2**20}),
        "misnamed_in_zip.zip": zip_bytes({f"{NAME}_final.ipynb": full}),
        "link_member.zip": zip_bytes({f"{NAME}.ipynb": b"/etc/shadow"}, link=f"{NAME}.ipynb"),
        "José Alvarez.zip": zip_bytes({f"{NAME}.ipynb": full}),
        f"{submissions.student_id('José Alvarez')}.zip": zip_bytes({f"{NAME}.ipynb": full}),
    }
    made["truncated.zip"] = made["zipped student.zip"][:len(made["zipped student.zip"]) // 2]
    for name, data in made.items():
        (folder / name).write_bytes(data)
    existing = root / "submitted" / "replaces_existing" / NAME
    existing.mkdir(parents=True)
    (existing / f"{NAME}.ipynb").write_bytes(full)


def new_class(root):
    shutil.copy(course.ROOT / "nbgrader_config.py", root)
    shutil.copytree(course.SOLUTIONS / NAME, root / "solutions" / NAME)
    run = classgrade.nbgrader_runner(root)
    classgrade.ensure_in_gradebook(root, [NAME], run)
    return run, root / "release" / NAME / f"{NAME}.ipynb"


def place(root, student, nb):
    folder = root / "submitted" / student / NAME
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / f"{NAME}.ipynb")


class Graded(typing.NamedTuple):
    root: pathlib.Path
    result: classgrade.ClassResult
    files: list  # the reports
    said: str  # everything the run wrote to the terminal
    left: list  # (pid, command line) of any process of a submission still running after the run
    contacted: bool  # whether anything connected to the grader-side service
    token: str  # marks the intruders' files and processes
    secret: str  # the value of the grader's GRADER_SECRET_TOKEN during the run
    sandboxes: pathlib.Path  # the run's TMPDIR: every exchange folder was made under it


def marked_processes(in_command_line: tuple, in_environment: tuple) -> list:
    """Processes (never this one or its parents) whose command line, or environment, holds a mark."""
    spared = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    found = []
    for process in psutil.process_iter(["cmdline", "environ", "status"]):
        command = " ".join(process.info["cmdline"] or ())
        environment = " ".join(f"{k}={v}" for k, v in (process.info["environ"] or {}).items())
        if process.pid not in spared and process.info["status"] != psutil.STATUS_ZOMBIE and (
                any(m in command for m in in_command_line) or any(m in environment for m in in_environment)):
            found.append((process.pid, command))
    return found


def left_running(token: str, sandboxes: pathlib.Path, patience=120.0) -> list:
    """What of the submissions still runs once grading has returned: a process marked with the
    token, or one whose command line names the run's temporary folder (every bubblewrap and every
    kernel does: it holds their shared folders). The cluster's workers are stopping as the run
    returns, and their kernels started ahead end with them: the wait ends as soon as none is left;
    `patience` is only its ceiling on a loaded machine, reached where something stays."""
    deadline = time.monotonic() + patience
    while (found := marked_processes((token, str(sandboxes)), (token,))) and time.monotonic() < deadline:
        time.sleep(0.2)
    return found


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    require(ISOLATED, NO_SANDBOX)
    root = tmp_path_factory.mktemp("class")
    run, released = new_class(root)
    perfect = perfect_answers()
    secret_file = tmp_path_factory.mktemp("elsewhere") / "shadow"
    secret_file.write_text(SECRET + "\nsecond line\n")
    token, secret = f"mark{secrets.token_hex(8)}", secrets.token_hex(16)

    for student, (cell, _) in ANSWERS.items():
        answers = {} if student == "blank" else {**perfect, VICTIM: cell} if cell else perfect
        place(root, student, submission(released, answers))
    for student, (cell, *_) in {**INTRUDERS, **MESSAGE_ATTACKS, **BY_HAND_ATTACKS}.items():
        attack = cell.replace("{root}", str(root)).replace("{token}", token)
        place(root, student, submission(released, {**perfect, VICTIM: attack}))
    for student, (how, cell, _, _) in EDITS.items():
        answers = {**perfect, VICTIM: cell} if cell else {k: v for k, v in perfect.items() if k != VICTIM}
        place(root, student, tamper(submission(released, answers), how))
    for student, (what, _) in BROKEN.items():
        place_broken(root, student, what, nbformat.writes(submission(released, perfect)), secret_file)
    for student in UNSAFE_FOLDERS:
        place(root, student, submission(released, perfect))

    zips = root / "lms_downloads"
    zips.mkdir()
    build_zips(zips, root, released, perfect)

    limits = Limits(cell_seconds=CELL_SECONDS, submission_seconds=600, memory_mb=1500, output_chars=20_000,
                    scratch_mb=SCRATCH_MB)
    said = []
    sandboxes = tmp_path_factory.mktemp("sandboxes")
    with pytest.MonkeyPatch.context() as patch, socket.create_server(("127.0.0.1", 0)) as service:
        patch.setenv("GRADER_SECRET_TOKEN", secret)  # the workers, and so the grader's side, have it
        patch.setenv("TMPDIR", str(sandboxes))  # the workers make every sandbox's shared folder there
        with terminal_output(said):
            result = classgrade.grade_class(root, [NAME], workers=2, limits=limits, zips=zips, progress=False,
                                            run=run)
        left = left_running(token, sandboxes)
        service.setblocking(False)
        try:
            service.accept()[0].close()
            contacted = True
        except BlockingIOError:
            contacted = False
    files = report.write_report(classgrade.scores(root, [NAME]), root / "reports", result.outcomes.values(),
                                result.zip_ids)
    run("export")
    return Graded(root, result, files, said[0], left, contacted, token, secret, sandboxes)


def errors_of(root, student, grade_id=VICTIM) -> str:
    """Every error a grade cell of `student`'s autograded notebook shows, one a line: the judge's verdict first
    where it refused the answer, then what the answer met where it ran."""
    nb = nbformat.read(root / "autograded" / student / NAME / f"{NAME}.ipynb", as_version=4)
    cell = next(c for c in course.grade_cells(nb) if course.nbgrader_meta(c)["grade_id"] == grade_id)
    return "\n".join(f"{o.ename}: {o.evalue}" for o in cell.outputs if o.output_type == "error")


def expected_totals(result):
    expected = {s: float(v[1]) for s, v in {**ANSWERS, **INTRUDERS, **MESSAGE_ATTACKS, **BY_HAND_ATTACKS}.items()}
    expected |= {s: float(v[2]) for s, v in EDITS.items()}
    expected |= {s: 0.0 for s in BROKEN}
    expected |= {result.zip_ids[z]: float(score) for z, (score, _) in ZIPS.items()}
    return expected


def test_every_submission_gets_its_intended_score_in_the_export_and_the_report(graded):
    root, result = graded.root, graded.result
    expected = expected_totals(result)
    with open(root / "grades.csv") as f:
        exported = {row["student_id"]: float(row["score"]) for row in csv.DictReader(f)}
    reported = {}
    with open(root / "reports" / "scores.csv") as f:
        for row in csv.DictReader(f):
            reported[row["student"]] = reported.get(row["student"], 0.0) + float(row["score"])
    wrong = {s: (exported.get(s), expected[s], result.outcomes.get((s, NAME))) for s in expected
             if exported.get(s) != expected[s]}
    assert exported == expected, wrong
    assert reported == expected
    unsafe = {(submissions.describe(s), NAME) for s in UNSAFE_FOLDERS}
    assert set(result.outcomes) == {(s, NAME) for s in expected} | unsafe


def test_a_student_folder_that_would_split_an_export_row_is_refused_with_the_reason(graded):
    with open(graded.root / "reports" / "failures.csv") as f:
        why = {row["student"]: row["problem"] for row in csv.DictReader(f) if row["graded"] == "no"}
    for folder in UNSAFE_FOLDERS:
        assert "rename it to grade it" in why[submissions.describe(folder)]
    with open(graded.root / "grades.csv") as f:
        assert not any(c in f.read() for c in ('"', "comma,student"))


def test_no_zip_can_claim_the_id_another_students_name_computes_to(graded):
    ids = graded.result.zip_ids
    impostor = f"{submissions.student_id('José Alvarez')}.zip"
    assert ids["José Alvarez.zip"] != ids[impostor]
    assert {graded.result.outcomes[(ids[z], NAME)].graded for z in ("José Alvarez.zip", impostor)} == {True}


def test_each_broken_file_is_that_students_zero_with_the_reason(graded):
    root, result = graded.root, graded.result
    with open(root / "reports" / "failures.csv") as f:
        why = {row["student"]: row["problem"] for row in csv.DictReader(f) if row["graded"] == "no"}
    expected = {s: reason for s, (_, reason) in BROKEN.items()}
    expected |= {result.zip_ids[z]: reason for z, (_, reason) in ZIPS.items() if reason}
    expected |= {submissions.describe(s): "rename it to grade it" for s in UNSAFE_FOLDERS}
    assert set(why) == set(expected)
    for student, reason in expected.items():
        assert reason in why[student], (student, why[student])
        outcome = result.outcomes[(student, NAME)]
        assert not outcome.graded and reason in outcome.reason
    messages = {(r["student"], r["exercise"]): r["message"] for r in classgrade.scores(root, [NAME])}
    assert messages[("empty_file", VICTIM)].startswith("Not graded:") and "is empty" in messages[("empty_file", VICTIM)]
    assert len(result.not_graded()) == len(expected)


def test_the_run_says_how_many_could_not_be_graded(graded, tmp_path, capsys, monkeypatch):
    """The command's exit status and last line, from the same class (graded again: nothing changes)."""
    from autograder.grader import cli
    root, result = graded.root, graded.result
    monkeypatch.setattr(classgrade, "grade_class", lambda *a, **k: result)
    status = cli.main(["grade", NAME, "--root", str(root), "--quiet", "--report", str(tmp_path)])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert status == cli.NOT_ALL_GRADED
    assert last.startswith(f"{len(result.not_graded())} submissions could not be graded and scored 0")


def test_workers_default_to_one_more_than_the_cores_and_zero_is_refused(monkeypatch, capsys, tmp_path):
    from autograder.grader import cli
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    asked = {}
    monkeypatch.setattr(classgrade, "grade_class", lambda *a, **k: asked.update(k) or classgrade.ClassResult({}, {}))
    monkeypatch.setattr(classgrade, "scores", lambda *a: [])
    monkeypatch.setattr(report, "write_report", lambda *a, **k: [])
    assert cli.main(["grade", NAME, "--root", str(tmp_path), "--quiet", "--report", str(tmp_path / "r")]) == 0
    assert asked["workers"] == 3 and asked["limits"].threads == 1
    cli.main(["grade", NAME, "--root", str(tmp_path), "--quiet", "--workers", "1", "--report", str(tmp_path / "r")])
    assert asked["workers"] == 1 and asked["limits"].threads == 2
    with pytest.raises(SystemExit):
        cli.main(["grade", NAME, "--workers", "0"])
    assert "--workers: must be 1 or more, not 0" in capsys.readouterr().err


def test_tampered_metadata_is_undone_and_noted(graded):
    result = graded.result
    for student, (_, _, _, note) in EDITS.items():
        outcome = result.outcomes[(student, NAME)]
        assert outcome.graded, student
        if note:
            assert any(note in n for n in outcome.notes), (student, outcome.notes)
    assert result.outcomes[("perfect", NAME)].notes == [], "an untouched notebook is restored silently"
    with open(graded.root / "reports" / "failures.csv") as f:
        rows = [row for row in csv.DictReader(f) if row["student"] == "added_grade_cell_1000_points"]
    assert rows and rows[0]["graded"] == "yes" and "earns nothing" in rows[0]["problem"]


def test_no_secret_reaches_the_terminal_the_reports_or_the_gradebook(graded):
    """Neither a file's secret (a symbolic link) nor the grader's secret variable, which a student
    cell printed the environment to find."""
    root, files, said = graded.root, graded.files, graded.said
    assert SECRET not in said and graded.secret not in said
    printed = root / "autograded" / "reads_the_grader_environment" / NAME / f"{NAME}.ipynb"
    assert "'HOME': '/home/student'" in printed.read_text(), "the cell printed the environment it saw"
    for path in [*files, root / "gradebook.db", root / "grades.csv", *(root / "autograded").rglob("*.ipynb")]:
        assert SECRET.encode() not in path.read_bytes() and graded.secret.encode() not in path.read_bytes(), path
    assert not list((root / "autograded").glob("symlink_to_a_secret/**/*.ipynb"))
    assert "checksum" not in said.lower(), "no 'checksum has changed' warning for unedited test cells"


def test_messages_are_capped_everywhere(graded):
    root, files = graded.root, graded.files
    row = next(r for r in classgrade.scores(root, [NAME]) if r["student"] == "huge_exception_message"
               and r["exercise"] == VICTIM)
    assert "ValueError" in row["message"] and "more characters]" in row["message"]
    assert len(row["message"]) < recording.MESSAGE_CHARS + 60
    assert all(f.stat().st_size < 2_000_000 for f in files)
    autograded = root / "autograded" / "huge_exception_message" / NAME / f"{NAME}.ipynb"
    assert autograded.stat().st_size < 2_000_000


def test_failures_say_why(graded):
    root = graded.root
    said = {s: errors_of(root, s) for s in ("endless_loop_ignoring_interrupts", "os_exit", "memory_bomb",
                                               "output_flood", "wrong_type", "wrong_shape", "wrong_dtype",
                                               "wrong_device", "nan", "renamed_function")}
    assert f"stopped after {CELL_SECONDS} s" in said["endless_loop_ignoring_interrupts"]
    assert "ended the Python process" in said["os_exit"]
    assert "1500 MB" in said["memory_bomb"]
    assert "printed" in said["output_flood"]
    assert "torch.Tensor" in said["wrong_type"]
    assert "NaN" in said["nan"]
    assert "shape" in said["wrong_shape"] and "dtype" in said["wrong_dtype"] and "device" in said["wrong_device"]
    assert "relu_grad" in said["renamed_function"] and "not defined" in said["renamed_function"]


def test_each_intruder_fails_with_what_it_met_and_changes_nothing(graded):
    """Each attack's message says what it met in the sandbox: files not there, no service of the
    grader's reachable, no secret, full scratch folders, an answer too large to grade."""
    root = graded.root
    assert (course.ROOT / "solutions" / NAME / f"{NAME}.ipynb").exists() and course.ROOT not in root.parents, \
        "the install checkout holds the solutions and is not the class graded"
    for student, (_, _, pattern) in INTRUDERS.items():
        met = errors_of(root, student)
        assert re.search(pattern, met), (student, met)
    assert not graded.contacted, "a submission connected to a service of the grader's"
    full = re.search(INTRUDERS["fills_tmp_and_shm"][2], errors_of(root, "fills_tmp_and_shm"))
    assert all(0 < int(mb) <= SCRATCH_MB for mb in full.groups()), full.group(0)
    assert (root / "gradebook.db").stat().st_size > 0
    perfect = nbformat.read(root / "submitted" / "perfect" / NAME / f"{NAME}.ipynb", as_version=4)
    assert course.solution_cells(perfect)


def test_what_a_kernel_sends_or_leaves_in_its_answers_is_its_own_zero(graded):
    for student, (_, _, pattern) in MESSAGE_ATTACKS.items():
        assert graded.result.outcomes[(student, NAME)].graded, student
        assert re.search(pattern, errors_of(graded.root, student)), (student, errors_of(graded.root, student))


def test_nothing_a_submission_started_runs_or_stays_after_grading(graded):
    """`ps` is clean (the daemons marked with the token were running during the run: that
    submission checks it); the files written to its /tmp and /dev/shm are nowhere."""
    assert graded.left == []
    pattern = f"{graded.token}-*"
    assert [*pathlib.Path("/tmp").glob(pattern), *pathlib.Path("/dev/shm").glob(pattern),
            *graded.root.parent.rglob(pattern)] == []
    assert list(graded.sandboxes.iterdir()) == [], "exchange folders (and their tmpfs) outlived the run"
    assert graded.result.run and cgroup.groups_of_run(graded.result.run) == [], "a kernel's control group outlived it"
    mounts = pathlib.Path("/proc/self/mounts").read_text()
    assert str(graded.sandboxes) not in mounts


@pytest.mark.needs(os.geteuid() == 0, reason="only root mounts a tmpfs per exchange folder")
def test_an_exchange_folder_is_size_capped_and_removed_with_its_mount(tmp_path, monkeypatch):
    """A kernel once wrote 2,000 MB into its exchange folder on the host's /tmp in 9 s."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    exchange = isolation.Exchange(size_mb=4)
    assert exchange.capped
    with pytest.raises(OSError, match="No space left"):
        exchange.new_file(".out", bytes(8 * 2**20))
    with pytest.raises(OSError, match="No space left"):  # the kernel's sockets have 16 MB of their own
        (exchange.sockets / "flood").write_bytes(bytes((isolation.IPC_MB + 1) * 2**20))
    exchange.remove()
    assert list(tmp_path.iterdir()) == [] and str(tmp_path) not in pathlib.Path("/proc/self/mounts").read_text()


def test_zips_are_read_never_extracted_and_never_replace_silently(graded):
    root, result = graded.root, graded.result
    student = result.zip_ids["zipped student.zip"]
    assert (root / "submitted" / student / NAME / f"{NAME}.ipynb").exists()
    assert not list(root.parent.glob(f"*{NAME}.ipynb")) and not list(root.glob(f"*{NAME}.ipynb"))
    kept = nbformat.read(root / "submitted" / "replaces_existing" / NAME / f"{NAME}.ipynb", as_version=4)
    assert "(x > 0).to(x.dtype)" in kept.cells[_index(kept.cells, f"{VICTIM}_solution")].source, "still the first one"
    assert not (root / "submitted" / result.zip_ids["zip_bomb.zip"]).exists()
    with open(root / "reports" / "zip_students.csv") as f:
        assert {row["zip"]: row["student"] for row in csv.DictReader(f)} == result.zip_ids


def test_student_ids_are_stable_distinct_and_plain():
    names = ["zipped student", "张伟", "张伟 ", "José García", "Jose Garcia", "Jose_Garcia", "..", "a/b", ""]
    ids = [submissions.student_id(n) for n in names]
    assert ids == [submissions.student_id(n) for n in names], "the same name always gives the same id"
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", i) for i in ids)
    assert submissions.student_id("Jose_Garcia") == "Jose_Garcia"
    assert submissions.student_id("José García").startswith("Jose_Garcia-")
    assert re.fullmatch(r"student-[0-9a-f]{8}", submissions.student_id("张伟"))
    computed = submissions.student_id("José Alvarez")
    assert submissions.student_id(computed) != computed, "a plain name cannot take a computed id"


def test_the_report_has_every_student_and_exercise(graded, tmp_path):
    root, result = graded.root, graded.result
    rows = classgrade.scores(root, [NAME])
    files = report.write_report(rows, tmp_path)
    assert all(f.exists() and f.stat().st_size > 0 for f in files)
    assert len({r["student"] for r in rows}) == len(expected_totals(result))
    assert report.pass_rates(rows)[f"{NAME}: {VICTIM}"] < report.pass_rates(rows)[f"{NAME}: sigmoid_grad"]


def test_feedback_and_formgrader_files_exist_for_graded_submissions_only(graded):
    root = graded.root
    run = classgrade.nbgrader_runner(root)
    run("generate_feedback", NAME, "--student=perfect")
    page = root / "feedback" / "perfect" / NAME / f"{NAME}.html"
    assert page.exists() and "relu_grad" in page.read_text() and "BEGIN HIDDEN TESTS" not in page.read_text()
    assert (root / "autograded" / "os_exit" / NAME / f"{NAME}.ipynb").exists()
    assert not (root / "autograded" / "empty_file").exists()


def test_a_grader_side_failure_is_not_graded_and_never_a_zero_in_the_gradebook(graded, tmp_path):
    """A grader that failed (what `_Grading` records where the reference notebook fails too) leaves the
    gradebook as it was; a problem of the student's files writes the 0 and the reason. In a copy of the class's
    gradebook, on the perfect student graded 12 before."""
    root = graded.root
    shutil.copy(root / "gradebook.db", tmp_path)
    shutil.copy(root / "nbgrader_config.py", tmp_path)
    recorder = recording.Recorder(tmp_path)
    outcomes = {}
    try:
        classgrade._record(recorder, outcomes, ("perfect", NAME), reason="the grading worker failed: KilledWorker",
                           grader_side=True)
        classgrade._record(recorder, outcomes, ("blank", NAME), reason="submitted/blank/... is empty")
    finally:
        recorder.close()
    assert not outcomes[("perfect", NAME)].graded and outcomes[("perfect", NAME)].grader_side
    rows = {r["student"]: r for r in classgrade.scores(tmp_path, [NAME]) if r["exercise"] == VICTIM}
    assert rows["perfect"]["score"] > 0 and "KilledWorker" not in rows["perfect"]["message"]
    assert rows["blank"]["score"] == 0 and "is empty" in rows["blank"]["message"]


def test_scores_stay_within_each_cells_points():
    cell = nbformat.v4.new_code_cell("x")
    for value, expected in (("1000", 0.0), ("-5", 0.0), ("nan", 0.0), ("0.5", 0.5), ("'text'", 1.0)):
        cell.outputs = [nbformat.v4.new_output("execute_result", data={"text/plain": value}, execution_count=1)]
        assert recording.cell_score(cell, 1.0)[0] == expected, value
    cell.outputs = [nbformat.v4.new_output("execute_result", data={"text/plain": "1"}, execution_count=1),
                    nbformat.v4.new_output("error", ename="GradingError", evalue="wrong", traceback=[])]
    assert recording.cell_score(cell, 1.0) == (0.0, "GradingError: wrong"), "an error counts wherever it is"


def test_the_plain_nbgrader_step_turns_an_impossible_partial_credit_into_an_error():
    cell = nbformat.v4.new_code_cell("x", metadata={"nbgrader": {"grade": True, "solution": False, "points": 1,
                                                                 "grade_id": "g", "locked": True}})
    cell.outputs = [nbformat.v4.new_output("execute_result", data={"text/plain": "1000"}, execution_count=1)]
    nb, _ = recording.BoundedPartialCredit().preprocess(nbformat.v4.new_notebook(cells=[cell]), {})
    out = nb.cells[0].outputs[0]
    assert out.output_type == "error" and "not a score between 0 and 1" in out.evalue


@SANDBOXED
def test_plain_mode_bounds_a_forged_partial_credit(tmp_path):
    """--plain: test cells run in the kernel, where a submission could make a test cell's last value 1000 by
    patching the checks: a patch outside every answer, which the by-hand exercises, graded first, never meet
    (the bound itself: test_scores_stay_within_each_cells_points)."""
    run, released = new_class(tmp_path)
    perfect = perfect_answers()
    # relu_grad's test cell ends with nb01_chain_rule.check_relu_grad(...): its value becomes the cell's value
    forged = ("import autograder.checks.nb01_chain_rule as _cr\n_real = _cr.check_relu_grad\n"
              "_cr.check_relu_grad = lambda name, *a, **k: 1000 if name == 'relu_grad' else _real(name, *a, **k)\n"
              + GOOD)
    place(tmp_path, "perfect", submission(released, perfect))
    place(tmp_path, "forged_partial_credit", submission(released, {**perfect, VICTIM: forged}))
    result = classgrade.grade_class(tmp_path, [NAME], workers=2, limits=Limits(cell_seconds=CELL_SECONDS),
                                    progress=False, run=run, plain=True)
    run("export")
    with open(tmp_path / "grades.csv") as f:  # the patch never ran where relu_grad was graded: 1 point, not 1000
        assert {row["student_id"]: float(row["score"]) for row in csv.DictReader(f)} == {
            "perfect": 12.0, "forged_partial_credit": 12.0}
    assert VICTIM not in result.outcomes[("forged_partial_credit", NAME)].messages


def test_restore_rebuilds_from_the_source_and_says_what_it_undid(graded):
    root = graded.root
    with classgrade.open_gradebook(root) as gb:
        source = sanitize.load_source(gb, NAME)
    released = course.read(root / "release" / NAME / f"{NAME}.ipynb")
    restored, notes = sanitize.restore(released, source)
    assert notes == []
    test = restored.cells[_index(restored.cells, VICTIM)]
    assert "BEGIN HIDDEN TESTS" in test.source and test.metadata.nbgrader["points"] == 1.0
    assert [c for c in restored.cells if c.get("outputs")] == []


def test_parse_notebook_names_what_is_wrong():
    cases = {b"   ": "is empty", b"\xff\xfe": "not UTF-8", b'{"cells": [': "not a complete notebook",
             b'{"nbformat": "5", "cells": []}': "nbformat 5", b"[" * 100_000 + b"]" * 100_000: "nests"}
    for data, reason in cases.items():
        with pytest.raises(submissions.NotGradable, match=re.escape(reason)):
            submissions.parse_notebook(data, "x.ipynb")


def test_nbgrader_env_does_not_grow_path():
    from autograder.grader.nbgrader_run import nbgrader_env, with_scripts_on_path
    before = os.environ["PATH"]
    for _ in range(50):
        with with_scripts_on_path():
            path = os.environ["PATH"]
        nbgrader_env()
    assert os.environ["PATH"] == before
    assert path.split(os.pathsep).count(os.path.dirname(sys.executable)) == 1


def test_class_grading_does_not_import_the_command_line():
    code = "import sys, autograder.grader.classgrade; print('autograder.grader.cli' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


def _answers_http(port: int) -> bool:
    """Whether an HTTP GET of a Dask route on this port gets a page (any route at all)."""
    import http.client
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", "/health")
        return connection.getresponse().status != 404
    except (OSError, http.client.HTTPException):  # not HTTP (a TLS port) or closed on us
        return False
    finally:
        connection.close()


def _tls_without_a_certificate_is_refused(host: str, port: int) -> bool:
    import socket
    import ssl
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=5) as raw, context.wrap_socket(raw) as tls:
            tls.sendall(b"\0" * 8)
            return tls.recv(1) == b""
    except (ssl.SSLError, ConnectionError, TimeoutError):
        return True


def test_the_local_cluster_authenticates_listens_on_loopback_only_and_limits_memory():
    import psutil
    with cluster.dask_client(1, None, memory_mb=1234) as client:
        info = client.scheduler_info()
        assert info["address"].startswith("tls://127.0.0.1:")
        assert [w["memory_limit"] for w in info["workers"].values()] == [1234 * 2**20]
        me = psutil.Process()
        listening = [c.laddr for p in [me, *me.children(recursive=True)] for c in p.net_connections("inet")
                     if c.status == psutil.CONN_LISTEN]
        assert listening and all(addr.ip == "127.0.0.1" for addr in listening), listening
        assert not [addr.port for addr in listening if _answers_http(addr.port)], "an HTTP route is served"
        host, port = info["address"].removeprefix("tls://").rsplit(":", 1)
        assert _tls_without_a_certificate_is_refused(host, int(port))


@SANDBOXED
def test_patched_checks_fool_the_kernel_but_not_the_grader(tmp_path):
    """The same cheating submission, graded in the kernel as nbgrader does and in trusted mode."""
    from autograder.grader import trusted
    from autograder.grader.sandbox import run_notebook

    source = course.read(course.solution_path(NAME))
    names = trusted.student_names(c.source for c in course.solution_cells(source))
    verdicts = {}
    for mode, trusted_names in (("kernel", None), ("trusted", names)):
        nb = submission(course.solution_path(NAME), {**perfect_answers(), VICTIM: CHEAT})
        run_notebook(nb, Limits(cell_seconds=CELL_SECONDS), trusted_names=trusted_names)
        cell = next(c for c in course.grade_cells(nb) if course.nbgrader_meta(c)["grade_id"] == VICTIM)
        verdicts[mode] = [o.evalue for o in cell.outputs if o.output_type == "error"]
    assert verdicts["kernel"] == []
    assert verdicts["trusted"] and "wrong values" in verdicts["trusted"][0]


@SANDBOXED
@pytest.mark.parametrize("name", course.assignment_names())
def test_every_reference_solution_earns_full_marks_in_trusted_mode(name):
    """A real kernel (isolated where possible) answers; every grade cell, hidden tests included,
    passes in the grader's process."""
    from autograder.grader import trusted
    from autograder.grader.sandbox import run_notebook

    source = course.read(course.solution_path(name))
    assert trusted.opted_in(source)
    names = trusted.student_names(c.source for c in course.solution_cells(source))
    problems = run_notebook(source, Limits(cell_seconds=CELL_SECONDS), trusted_names=names,
                            first=grading_task.by_hand_first(source, course.ROOT, name))
    failures = {course.nbgrader_meta(c)["grade_id"]: [o.get("evalue") for o in c.outputs if o.output_type == "error"]
                for c in course.grade_cells(source)}
    assert problems == [] and {k: v for k, v in failures.items() if v} == {}


def _course_of(root, name):
    """A course directory holding one notebook (and its answer key), its release and a perfect student."""
    shutil.copy(course.ROOT / "nbgrader_config.py", root)
    shutil.copytree(course.SOLUTIONS / name, root / "solutions" / name)
    run = classgrade.nbgrader_runner(root)
    classgrade.ensure_in_gradebook(root, [name], run)
    released = course.read(root / "release" / name / f"{name}.ipynb")
    solution = course.read(course.solution_path(name))
    answers = {course.nbgrader_meta(c)["grade_id"]: c.source for c in course.solution_cells(solution)}
    for cell in released.cells:
        if course.nbgrader_meta(cell).get("grade_id") in answers:
            cell.source = answers[course.nbgrader_meta(cell)["grade_id"]]
    folder = root / "submitted" / "perfect" / name
    folder.mkdir(parents=True)
    nbformat.write(released, folder / f"{name}.ipynb")
    return run


@SANDBOXED
def test_grading_from_another_folder_finds_the_answer_keys_of_the_root_it_was_given(tmp_path_factory):
    """Trusted test cells of 04 load its answer key in the grader: once they looked in the working
    directory, so `grade --root COURSE` run elsewhere scored a perfect 04 8/20 and said "graded 1 of 1"."""
    name, root, elsewhere = "04_toggles", tmp_path_factory.mktemp("course"), tmp_path_factory.mktemp("elsewhere")
    run = _course_of(root, name)
    env = {k: v for k, v in os.environ.items() if k != "COURSE_ROOT"}
    done = subprocess.run([sys.executable, "-m", "autograder.grader.cli", "grade", name, "--root", str(root), "--quiet",
                           "--cell-seconds", str(CELL_SECONDS), "--workers", "1"], cwd=elsewhere, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run("export")
    with open(root / "grades.csv") as f:
        row = next(csv.DictReader(f))
    assert float(row["score"]) == float(row["max_score"]) > 0, row


@SANDBOXED
def test_a_missing_answer_key_is_the_graders_failure_not_the_students_zero(tmp_path, monkeypatch):
    name = "04_toggles"
    run = _course_of(tmp_path, name)
    (tmp_path / "solutions" / name / "answer_key.py").unlink()
    monkeypatch.delenv("COURSE_ROOT")
    monkeypatch.chdir(tmp_path_parent := tmp_path.parent)
    assert not (tmp_path_parent / "solutions").exists()
    result = classgrade.grade_class(tmp_path, [name], workers=1, limits=Limits(cell_seconds=CELL_SECONDS),
                                    progress=False, run=run)
    outcome = result.outcomes[("perfect", name)]
    assert not outcome.graded and outcome.grader_side
    assert "the grader failed, not the submission" in outcome.reason
    assert "no answer key for 04_toggles" in outcome.reason
    assert "reference notebook, graded the same way, fails too: " in outcome.reason, "the control says it is ours"
    assert classgrade.scores(tmp_path, [name]) == [], "nothing was written to the gradebook for it"


def test_a_worker_with_several_threads_grades_one_submission_at_a_time(monkeypatch):
    """The grader's side redirects stdout and draws from the global RNG: two submissions at once in one
    process (a --scheduler worker with several threads) would mix them."""
    running, most = [], []

    def fake_run(nb, *args, **kwargs):
        running.append(1)
        most.append(len(running))
        time.sleep(0.2)
        running.pop()
        return []
    monkeypatch.setattr(grading_task, "run_notebook", fake_run)
    monkeypatch.setattr(grading_task, "thread_pool", lambda: None)
    nb = nbformat.writes(nbformat.v4.new_notebook())
    threads = [threading.Thread(target=grading_task.execute_submission, args=(nb, {})) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(most) == 3 and max(most) == 1


def test_lines_that_reach_for_the_grader_are_listed_for_the_instructor(graded):
    with open(graded.root / "reports" / "flags.csv") as f:
        flagged = {}
        for row in csv.DictReader(f):
            flagged.setdefault(row["student"], []).append(row["what"])

    def says(student, words):
        return any(words in what for what in flagged.get(student, ()))
    assert says("patches_the_checks", "changes autograder.checks.expect_close")
    assert says("copies_from_the_install_checkout", "uses exec")
    assert says("patches_builtins", "uses builtins") and says("copies_the_solution", "names the course's solutions")
    assert says("switches_off_the_autograd_guard", "changes autograder.checks.student_calls._autograd_forbidden")
    for student, (*_, flag, _) in BY_HAND_ATTACKS.items():
        assert any(re.search(flag, what) for what in flagged[student]), (student, flagged[student])
    assert "perfect" not in flagged and "blank" not in flagged


def test_an_answer_around_a_by_hand_rule_scores_0_with_the_line_and_the_rule(graded):
    """Each scored full marks in trusted mode before the judge (issue 28): the kernel's guard was patched,
    reached around, or bound early. relu_grad's message is the judge's, which names the line; every other
    by-hand exercise keeps its points, but where the answer patched or reflected as it loaded."""
    rows = classgrade.scores(graded.root, [NAME])
    for student, (_, _, own, _, other) in BY_HAND_ATTACKS.items():
        mine = {r["exercise"]: r for r in rows if r["student"] == student}
        assert graded.result.outcomes[(student, NAME)].graded
        assert mine[VICTIM]["message"].startswith("ByHandRule: relu_grad: cell ")
        assert re.search(own, mine[VICTIM]["message"]), (student, mine[VICTIM]["message"])
        others = [r for name, r in mine.items() if name != VICTIM]
        if other is None:
            assert all(r["score"] == r["max_score"] for r in others), (student, others)
        else:
            assert all(r["score"] == 0 and re.search(other, r["message"]) and "ByHandRule" in r["message"]
                       for r in others), (student, others)


def trimmed(name, answers):
    """A submission of `name` as a student may leave it: the reference's answers but `answers`, every other
    cell of theirs emptied but the set-up cell (it runs in seconds, and no released cell calls an answer)."""
    reference = {course.nbgrader_meta(c)["grade_id"].removesuffix("_solution"): c.source
                 for c in course.solution_cells(course.read(course.solution_path(name)))}
    nb = submission(course.release_path(name), {**reference, **answers})
    setup = next(c for c in nb.cells if c.cell_type == "code" and "import torch" in c.source)
    for cell in nb.cells:
        if cell.cell_type == "code" and cell is not setup and not course.nbgrader_meta(cell):
            cell.source = ""
    return nb


EMPTY_KERNEL = "@triton.jit\ndef nothing(x_ptr):\n    pass\n\n\n"
# Answers of 03 and 09 that got around the kernel's guards (issue 28: 31/31 and 14/14 in trusted mode), with
# the answers that use them refused too (03's Tensor engine calls vjp_relu; 09's TritonSiLU, silu_forward).
# (notebook, student) -> (answers, expected total, {grade_id: what its message must match})
OTHER_BY_HAND_ATTACKS = {
    ("03_vjp", "perfect"): ({}, 31, {}),
    ("03_vjp", "dispatch_switched_off"): (
        {"vjp_relu": "def vjp_relu(x, g):\n    with torch._C._DisableTorchDispatch():\n"
                     "        return g * (x > 0).to(g.dtype)"}, 23,
        {"vjp_relu": r"ByHandRule: vjp_relu: cell \d+, line 2 .* reaches torch\._C, a private part of torch",
         "Tensor-ops": r"ByHandRule: Tensor: .* reaches torch\._C"}),
    ("09_kernels", "perfect"): ({}, 14, {}),
    ("09_kernels", "empty_kernel_then_silu"): (
        {"silu_forward": EMPTY_KERNEL + "def silu_forward(x):\n    nothing[(1,)](x)\n"
                                        "    with torch._C._DisableTorchDispatch():\n        return F.silu(x)"}, 10,
        {"silu_forward": r"ByHandRule: silu_forward: .* reaches torch\._C", "TritonSiLU": r"ByHandRule: TritonSiLU"}),
    ("09_kernels", "empty_kernel_then_numpy"): (
        {"silu_forward": "import numpy as np\n" + EMPTY_KERNEL + "def silu_forward(x):\n    nothing[(1,)](x)\n"
                         "    y = np.asarray(x.detach().cpu().double())\n"
                         "    return torch.from_numpy(np.asarray(y / (1 + np.exp(-y)))).to(x.dtype)"},
        10, {"silu_forward": r"uses numpy\.\w+ outside a kernel: in this exercise all the maths is in your Triton "
                             r"kernels"}),
    ("09_kernels", "dispatch_modes_switched_off"): (
        {"silu_forward": "from torch.utils._python_dispatch import _disable_current_modes\n" + EMPTY_KERNEL +
                         "def silu_forward(x):\n    nothing[(1,)](x)\n    with _disable_current_modes():\n"
                         "        return x * torch.sigmoid(x)"}, 0,
        {"silu_forward": r"imports torch\.utils\._python_dispatch, a private part of torch",
         "rmsnorm_forward": r"torch\.utils\._python_dispatch .*another by-hand answer"}),
    ("09_kernels", "replaces_the_guard"): (
        {"silu_forward": "from autograder.checks import kernel_guard\n"
                         "kernel_guard.run_guarded = lambda *a, **k: kernel_guard.KernelRun(*a)\n"
                         "def silu_forward(x):\n    return x * torch.sigmoid(x)"}, 10,
        {"silu_forward": r"uses torch\.sigmoid outside a kernel", "TritonSiLU": r"uses torch\.sigmoid outside"}),
}


@SANDBOXED
def test_answers_around_the_guards_of_03_and_09_score_0_in_both_modes(tmp_path):
    """A class run of 03 and 09 in trusted mode, then 03 again in plain mode (its hidden tests in the kernel):
    the judge's verdicts are the same in both."""
    names = ["03_vjp", "09_kernels"]
    shutil.copy(course.ROOT / "nbgrader_config.py", tmp_path)
    for name in names:
        shutil.copytree(course.SOLUTIONS / name, tmp_path / "solutions" / name)
    run = classgrade.nbgrader_runner(tmp_path)
    classgrade.ensure_in_gradebook(tmp_path, names, run)
    for (name, student), (answers, _, _) in OTHER_BY_HAND_ATTACKS.items():
        folder = tmp_path / "submitted" / student / name
        folder.mkdir(parents=True)
        nbformat.write(trimmed(name, answers), folder / f"{name}.ipynb")
    limits = Limits(cell_seconds=CELL_SECONDS, submission_seconds=600)
    for mode, graded_names in (("trusted", names), ("plain", ["03_vjp"])):
        result = classgrade.grade_class(tmp_path, graded_names, workers=2, limits=limits, progress=False, run=run,
                                        plain=mode == "plain")
        assert result.not_graded() == [], [o.reason for o in result.not_graded()]
        rows = classgrade.scores(tmp_path, graded_names)
        for (name, student), (_, total, says) in OTHER_BY_HAND_ATTACKS.items():
            if name not in graded_names:
                continue
            mine = {r["exercise"]: r for r in rows if r["student"] == student and r["notebook"] == name}
            assert sum(r["score"] for r in mine.values()) == total, (mode, name, student, mine)
            for grade_id, pattern in says.items():
                assert re.search(pattern, mine[grade_id]["message"]), (mode, student, mine[grade_id])


def test_the_watchdog_ends_a_run_where_nothing_finishes_or_no_worker_is_left():
    """Its clock is injected: what it says at each instant, not how long a test waited."""
    now = [0.0]
    dog = classgrade.Watchdog(patience_s=100, workerless_s=10, clock=lambda: now[0])
    now[0] = 99
    assert dog.stalled(workers=2) is None
    dog.moved()  # a submission finished at 99
    now[0] = 198.5
    assert dog.stalled(workers=2) is None
    now[0] = 199
    assert "nothing finished for 100 s" in dog.stalled(workers=2)
    dog = classgrade.Watchdog(patience_s=100, workerless_s=10, clock=lambda: now[0])  # made at 199
    now[0] = 208
    assert dog.stalled(workers=0) is None
    now[0] = 209
    assert dog.stalled(workers=1) is None, "a worker came back: the wait starts again"
    now[0] = 218
    assert dog.stalled(workers=0) is None
    now[0] = 219
    assert dog.stalled(workers=0) == "the cluster had no worker for 10 s"


@contextlib.contextmanager
def threads_cluster():
    """A cluster whose one worker is a thread of this process, so a test can patch what it runs."""
    from distributed import LocalCluster
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tcp", host="127.0.0.1",
                      dashboard_address=None) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def course_01(tmp_path_factory):
    """Notebook 01's course, released and in the gradebook, with no submission: tests copy it."""
    root = tmp_path_factory.mktemp("course_01")
    new_class(root)
    return root


def small_class(course_01, root, students):
    """A copy of `course_01` in `root` with `students` (name -> relu_grad's answer); each answer carries
    its student's name, so a patched run_notebook tells them (and the reference notebook) apart."""
    shutil.copytree(course_01, root, dirs_exist_ok=True)
    released = root / "release" / NAME / f"{NAME}.ipynb"
    for student, answer in students.items():
        place(root, student, submission(released, {**perfect_answers(), VICTIM: f"{answer}\n# student: {student}"}))
    return classgrade.nbgrader_runner(root)


def grader_that_raises(at, runs, failing=(), block=None):
    """A stand-in for run_notebook that runs every code cell as a pass, and raises ValueError in the
    cell `at` for the students in `failing` ("reference": the reference notebook). `runs` collects who
    ran; with `block` (started, release), every run waits for `release` once it has said `started`."""
    def run(nb, *args, **kwargs):
        found = re.search(r"# student: (\w+)", nbformat.writes(nb))
        who = found.group(1) if found else "reference"
        runs.append(who)
        if block:
            block[0].set()
            block[1].wait()
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.outputs = []
                if who in failing and course.nbgrader_meta(cell).get("grade_id") == at:
                    raise ValueError(f"the grader met something it cannot read in {who}'s answer")
        return []
    return run


def points_before(grade_id):
    """Points of notebook 01's grade cells before `grade_id`'s."""
    cells = course.grade_cells(course.read(course.solution_path(NAME)))
    ids = [course.nbgrader_meta(c)["grade_id"] for c in cells]
    return sum(course.nbgrader_meta(c)["points"] for c in cells[:ids.index(grade_id)])


def test_a_failure_the_reference_passes_is_the_submissions_zero_with_the_reason(course_01, tmp_path, monkeypatch):
    """The grader's side raises while it grades relu_grad of two submissions (as a crafted answer could
    make it); the reference notebook, graded the same way once, passes: each is graded, every exercise
    graded before keeps its score, relu_grad and every later one score 0 with what happened."""
    run = small_class(course_01, tmp_path, {"fine": GOOD, "breaks": GOOD, "breaks_too": GOOD})
    runs = []
    monkeypatch.setattr(grading_task, "run_notebook", grader_that_raises(VICTIM, runs, {"breaks", "breaks_too"}))
    monkeypatch.setattr(grading_task, "thread_pool", lambda: None)
    with threads_cluster() as cluster:
        result = classgrade.grade_class(tmp_path, [NAME], workers=1, scheduler=cluster.scheduler_address,
                                        limits=Limits(unsandboxed=True), progress=False, run=run)
    assert sorted(runs) == ["breaks", "breaks_too", "fine", "reference"], "one control for the assignment"
    assert result.not_graded() == []
    rows = classgrade.scores(tmp_path, [NAME])
    totals = {s: sum(r["score"] for r in rows if r["student"] == s) for s in ("fine", "breaks", "breaks_too")}
    assert totals == {"fine": TOTAL, "breaks": points_before(VICTIM), "breaks_too": points_before(VICTIM)}
    said = {r["exercise"]: r["message"] for r in rows if r["student"] == "breaks"}
    assert said[VICTIM] == said["softmax_xent_grad"] == (
        "GradingStopped: your notebook made the grader fail: ValueError: the grader met something it cannot read "
        "in breaks's answer")
    assert said["linear_mse_grad"] == ""
    assert result.stopped[("breaks", NAME)].startswith("your notebook made the grader fail: ValueError")
    problems = {r["student"]: r for r in report.failure_rows(result.outcomes.values())}
    assert problems["breaks"]["graded"] == "yes" and "its grading stopped" in problems["breaks"]["problem"]


def test_a_failure_the_reference_meets_too_is_the_graders_and_not_graded(course_01, tmp_path, monkeypatch):
    """The same failure, where the reference notebook fails too: the grader is broken; not graded, with
    both causes, nothing written to the gradebook, and a clean class beside it is graded without a control."""
    run = small_class(course_01, tmp_path, {"fine": GOOD, "breaks": GOOD})
    runs = []
    monkeypatch.setattr(grading_task, "run_notebook", grader_that_raises(VICTIM, runs, {"breaks", "reference"}))
    monkeypatch.setattr(grading_task, "thread_pool", lambda: None)
    with threads_cluster() as cluster:
        result = classgrade.grade_class(tmp_path, [NAME], workers=1, scheduler=cluster.scheduler_address,
                                        limits=Limits(unsandboxed=True), progress=False, run=run)
        outcome = result.outcomes[("breaks", NAME)]
        assert not outcome.graded and outcome.grader_side and result.stopped == {}
        assert outcome.reason.startswith("the grader failed, not the submission: ValueError: the grader met something "
                                         "it cannot read in breaks's answer")
        assert "reference notebook, graded the same way, fails too: ValueError: the grader met something it cannot " \
               "read in reference's answer" in outcome.reason
        assert {r["student"] for r in classgrade.scores(tmp_path, [NAME])} == {"fine"}
        (tmp_path / "submitted" / "breaks").rename(tmp_path / "breaks_put_aside")
        runs.clear()
        clean = classgrade.grade_class(tmp_path, [NAME], workers=1, scheduler=cluster.scheduler_address,
                                       limits=Limits(unsandboxed=True), progress=False, run=run)
    assert runs == ["fine"] and clean.not_graded() == [], "a clean class never pays for a control"


def run_in_background(call):
    """Start `call` in a thread; return a function that waits for its result (or raises its error)."""
    import concurrent.futures
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    future = pool.submit(call)
    pool.shutdown(wait=False)
    return future.result


def test_a_run_whose_cluster_lost_every_worker_ends_with_each_submission_not_graded(course_01, tmp_path, monkeypatch):
    """Its one worker is closed while it grades (a handshake says when): the run returns instead of waiting
    for ever, each submission not graded, the grader's side, with the reason."""
    run = small_class(course_01, tmp_path, {"first": GOOD, "second": GOOD})
    started, release = threading.Event(), threading.Event()
    monkeypatch.setattr(grading_task, "run_notebook", grader_that_raises(VICTIM, [], block=(started, release)))
    monkeypatch.setattr(grading_task, "thread_pool", lambda: None)
    monkeypatch.setattr(classgrade, "WORKERLESS_S", 0.0)  # no worker at all ends it at once
    monkeypatch.setattr(classgrade, "POLL_S", 0.05)
    with threads_cluster() as cluster:
        try:
            result = run_in_background(lambda: classgrade.grade_class(
                tmp_path, [NAME], workers=1, scheduler=cluster.scheduler_address, limits=Limits(unsandboxed=True),
                progress=False, run=run))
            started.wait()
            worker = next(iter(cluster.workers.values()))
            cluster.sync(worker.close, executor_wait=False)  # its thread stays blocked: it never answers
            result = result()
        finally:
            release.set()
    assert len(result.outcomes) == 2
    for outcome in result.outcomes.values():
        assert not outcome.graded and outcome.grader_side
        assert outcome.reason.startswith("the grader stopped waiting for it: the cluster had no worker")
    assert classgrade.scores(tmp_path, [NAME]) == []


def test_a_run_where_nothing_finishes_ends_with_the_reason(course_01, tmp_path, monkeypatch):
    """A grading task that never returns (the grader's side hung): past what a submission may take (here
    0 s, the limits injected), the run ends and says why."""
    run = small_class(course_01, tmp_path, {"hangs": GOOD})
    started, release = threading.Event(), threading.Event()
    monkeypatch.setattr(grading_task, "run_notebook", grader_that_raises(VICTIM, [], block=(started, release)))
    monkeypatch.setattr(grading_task, "thread_pool", lambda: None)
    monkeypatch.setattr(classgrade, "STALL_MARGIN_S", 0.0)
    monkeypatch.setattr(classgrade, "POLL_S", 0.05)
    with threads_cluster() as cluster:
        try:
            result = classgrade.grade_class(tmp_path, [NAME], workers=1, scheduler=cluster.scheduler_address,
                                            limits=Limits(submission_seconds=0, unsandboxed=True), progress=False,
                                            run=run)
        finally:
            release.set()
    assert started.is_set()
    outcome = result.outcomes[("hangs", NAME)]
    assert not outcome.graded and outcome.grader_side
    assert re.fullmatch(r"the grader stopped waiting for it: nothing finished for \d+ s, longer than grading a "
                        r"submission may take; grade it again", outcome.reason)


# Two tensors of float32, 128 MB and 96 MB: within every bound of the boundary (autograder.checks.boundary.Bounds),
# and what the grader holds as it reads them takes its worker more than 400 MB over what it held before.
HUGE = "import torch\ndef relu_grad(x):\n    return torch.zeros(2**25), torch.zeros(3 * 2**23)"
TIGHT_WORKER_MB = 640  # a worker held about 380 MB after grading notebook 01's reference (measured); Dask pauses
#                        a worker at 80% of its limit and restarts it at 95%


@SANDBOXED
@pytest.mark.timeout(1200)
def test_a_submission_whose_grading_takes_its_worker_over_its_memory_scores_0_with_the_reason(course_01, tmp_path):
    """Trusted mode, a real local cluster of one worker: an allowed answer so large that reading it takes
    the grading worker past --worker-memory-mb. Dask restarts the worker, grades it again, gives up
    (KilledWorker); the reference notebook, graded on the same cluster, passes: the submission is graded,
    every exercise 0 with the reason, never "not graded"; the perfect student beside it scores full marks."""
    import dask
    run = small_class(course_01, tmp_path, {"a_huge_answer": HUGE, "perfect": GOOD})
    # the nanny samples its worker's memory: every 10 ms, not Dask's 100, so that no peak goes unseen
    with dask.config.set({"distributed.worker.memory.monitor-interval": "10ms"}):
        result = classgrade.grade_class(tmp_path, [NAME], workers=1, limits=Limits(cell_seconds=CELL_SECONDS),
                                        progress=False, run=run, worker_memory_mb=TIGHT_WORKER_MB)
    assert result.not_graded() == [], [o.reason for o in result.not_graded()]
    rows = classgrade.scores(tmp_path, [NAME])
    assert {s: sum(r["score"] for r in rows if r["student"] == s) for s in ("perfect", "a_huge_answer")} == {
        "perfect": TOTAL, "a_huge_answer": 0}
    reason = ("the grading worker was killed while it ran your notebook: it exceeded the grader's memory "
              f"({TIGHT_WORKER_MB} MB)")
    assert result.stopped == {("a_huge_answer", NAME): reason}
    assert {r["message"] for r in rows if r["student"] == "a_huge_answer"} == {f"GradingStopped: {reason}"}


class EndedTask:
    """A grading task that has already ended: its result is `outcome`, or `outcome` is what it raises."""

    def __init__(self, key, outcome):
        self.key, self.outcome = key, outcome

    def result(self):
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome

    def add_done_callback(self, callback):
        callback(self)


class ClusterEvents:
    """What `_Grading` asks of a Dask client besides running tasks: the scheduler's events."""

    def __init__(self, events):
        self.events = events  # [(topic, event)]

    def get_events(self, topic):
        return tuple((0.0, event) for name, event in self.events if name == topic)

    def nthreads(self):
        return {"worker": 1}


def killed_on(worker):
    from distributed import KilledWorker
    return KilledWorker("a task", types.SimpleNamespace(address=worker), 1)


def passed(nb_json):
    return {"notebook": nb_json, "problems": [], "seconds": 1.0, "failure": None}


def grade_through(course_01, root, outcomes, events):
    """Grade one perfect submission of notebook 01 as `_Grading` does, the tasks it sends ending with
    `outcomes` in turn (`passed`: the notebook runs with no error); return (the outcome, what was sent, the
    run's `stopped`)."""
    small_class(course_01, root, {"student": GOOD})
    with classgrade.open_gradebook(root) as gb:
        source = sanitize.load_source(gb, NAME)
    nb, notes = sanitize.restore(course.read(root / "submitted" / "student" / NAME / f"{NAME}.ipynb"), source)
    sent = []

    def submit(nb_json, name, **placement):
        outcome = outcomes[len(sent)]
        sent.append(("reference" if "# student: student" not in nb_json else "student", placement))
        return EndedTask(f"task-{len(sent) - 1}", outcome(nb_json) if callable(outcome) else outcome)
    recorder, outcomes_of = recording.Recorder(root), {}
    try:
        grading = classgrade._Grading(root, ClusterEvents(events), submit, recorder, outcomes_of, {NAME: source},
                                      classgrade.Phases(), tqdm.tqdm(disable=True), memory_mb=640)
        grading.run([(("student", NAME), nb, notes)], classgrade.Watchdog(1e9, 1e9))
    finally:
        recorder.close()
    return outcomes_of[("student", NAME)], sent, grading.stopped


def test_a_submission_whose_workers_died_while_it_waited_its_turn_is_sent_again_and_never_blamed(course_01,
                                                                                                 tmp_path):
    """Dask gives up (KilledWorker) on every task that was a dead worker's, graded there or only waiting:
    only a task whose worker said it had begun grading it (GRADING_STARTED) is blamed."""
    elsewhere = (classgrade.GRADING_STARTED, {"task": "task-0", "worker": "w0"})  # Dask's first try, on w0
    outcome, sent, _ = grade_through(course_01, tmp_path / "waited", [killed_on("w1"), passed], [elsewhere])
    assert sent == [("student", {}), ("student", {})], "no event for it on w1: sent again, no control"
    assert outcome.graded and outcome.messages == {}

    outcome, sent, stopped = grade_through(course_01, tmp_path / "waited_twice", [killed_on("w1"), killed_on("w2")],
                                           [elsewhere])
    assert sent == [("student", {}), ("student", {})]
    assert not outcome.graded and outcome.grader_side and stopped == {}
    assert "the workers it waited on died before they began to grade it" in outcome.reason

    memory = ("worker-restart-memory", {"worker": "w1", "pid": 1, "rss": 1})
    started = (classgrade.GRADING_STARTED, {"task": "task-0", "worker": "w1"})
    outcome, sent, stopped = grade_through(course_01, tmp_path / "graded_there", [killed_on("w1"), passed],
                                           [started, memory])
    assert sent == [("student", {}), ("reference", {"priority": 1})], "blamed only once its reference passed"
    reason = "the grading worker was killed while it ran your notebook: it exceeded the grader's memory (640 MB)"
    assert outcome.graded and stopped == {("student", NAME): reason}
    assert set(outcome.messages.values()) == {f"GradingStopped: {reason}"} and len(outcome.messages) == 7


def test_scores_the_gradebook_cannot_take_are_the_graders_failure_and_not_graded(course_01, tmp_path):
    """The other "not graded" path: the gradebook refuses the scores (here another program holds it
    locked, as the formgrader may), so nothing is written and the cause is said."""
    import sqlite3
    small_class(course_01, tmp_path, {"student": GOOD})
    with classgrade.open_gradebook(tmp_path) as gb:
        source = sanitize.load_source(gb, NAME)
    nb, _ = sanitize.restore(course.read(tmp_path / "submitted" / "student" / NAME / f"{NAME}.ipynb"), source)
    recorder, outcomes = recording.Recorder(tmp_path), {}
    holder = sqlite3.connect(tmp_path / "gradebook.db")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        classgrade._record(recorder, outcomes, ("student", NAME), executed=nb, source=source)
    finally:
        recorder.close()
        holder.rollback()
        holder.close()
    outcome = outcomes[("student", NAME)]
    assert not outcome.graded and outcome.grader_side
    assert outcome.reason.startswith("its scores could not be recorded (OperationalError")
    assert "database is locked" in outcome.reason
    assert classgrade.scores(tmp_path, [NAME]) == []

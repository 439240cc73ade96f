"""The benchmarks run to the end on the classes they simulate, so that the figures in the README can
be made again. Small runs: the numbers are not checked here, only that every kind is met and survived."""
import os
import re
import subprocess
import sys

import course
import pytest

from autograder.grader import isolation


@pytest.mark.needs(isolation.available(), reason=f"kernels cannot be sandboxed here: {isolation.problem()}")
@pytest.mark.timeout(900)
def test_the_grading_benchmark_survives_every_kind_of_submission():
    """5 students is the smallest class with every kind (a crash makes serial nbgrader exit 1; an
    endless loop takes its cell's whole time limit, shortened here to 10 s)."""
    done = subprocess.run([sys.executable, "benchmarks/grading.py", "--students", "5", "--no-overhead",
                           "--cell-seconds", "10", "01_chain_rule"],
                          cwd=course.ROOT, capture_output=True, text=True, timeout=840)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    said = done.stdout
    assert "per notebook 1 perfect, 1 partial, 1 blank, 1 crash, 1 endless)" in said, said
    assert re.search(r"^serial nbgrader autograde: .*\(exit status \d+; \d of 5 recorded\)$", said, re.M), said
    assert re.search(r"^backprop-course grade: .*\(5 of 5 graded\)$", said, re.M), said
    assert re.search(r"^speed-up: \d+\.\d\dx$", said, re.M), said
    [timed] = [line for line in said.splitlines() if line.startswith("our seconds per submission")]
    assert all(f" {kind} " in timed for kind in ("perfect", "partial", "blank", "crash", "endless")), timed
    assert re.search(r"the workers' time on judge and flags \(summed\) +\d+\.\d s$", said, re.M), said


def test_the_kernels_benchmark_counts_bytes_without_cuda():
    """Without CUDA the kernels run in Triton's interpreter: bytes only, and the fused SiLU moves what it
    must (x read, y written: twice x's size) where the eager formula moves five times x's size."""
    done = subprocess.run([sys.executable, "benchmarks/kernels.py"], cwd=course.ROOT, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "COURSE_DEVICE": "cpu"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "its times mean nothing" in done.stdout
    silu = done.stdout.split("\nRMSNorm")[0]
    moved = {(m[1], m[2]): float(m[3]) for m in re.finditer(
        r"^(eager formula|TritonSiLU \(ours\))\s+(forward|forward \+ backward)\s+[\d,]+\s+([\d.]+)$", silu, re.M)}
    assert moved[("eager formula", "forward")] == 5.0 and moved[("TritonSiLU (ours)", "forward")] == 2.0, done.stdout
    assert moved[("TritonSiLU (ours)", "forward + backward")] == 5.0, done.stdout


def test_the_attention_benchmark_counts_saved_bytes_without_cuda():
    """Without CUDA: bytes only, and what FlashAttention saves for its backward grows as N (q, k, v, o, lse: 4x
    from N = 64 to 256) where eager attention's grows faster (its P is N x N per head)."""
    done = subprocess.run([sys.executable, "benchmarks/attention.py"], cwd=course.ROOT, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "COURSE_DEVICE": "cpu"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Times and peak memory need a GPU" in done.stdout, done.stdout
    saved = {(int(m[1]), m[2]): float(m[3].replace(",", "")) for m in re.finditer(
        r"^\s*(\d+)  (eager|FlashAttention \(ours\))\s+[\d,]+\s+([\d,]+)$", done.stdout, re.M)}
    ours, eager = saved[(256, "FlashAttention (ours)")] / saved[(64, "FlashAttention (ours)")], \
        saved[(256, "eager")] / saved[(64, "eager")]
    assert abs(ours - 4) < 0.1 and eager > 6, done.stdout


@pytest.mark.needs(isolation.available(), reason=f"kernels cannot be sandboxed here: {isolation.problem()}")
@pytest.mark.needs(os.geteuid() == 0, reason="control groups are made where the grader is root")
@pytest.mark.timeout(900)
def test_the_cpu_shares_benchmark_grades_the_honest_student_in_every_condition():
    """One run of each condition (alone or beside a spinning neighbour, with and without the CPU limit):
    the honest student is graded in each, and the neighbour's CPU use is counted where there is one."""
    done = subprocess.run([sys.executable, "benchmarks/cpu_shares.py", "--quick"], cwd=course.ROOT,
                          capture_output=True, text=True, timeout=840)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    said = done.stdout
    assert re.search(r"^01_chain_rule, .*: \d+ cores, 1 worker\(s\), \d+ CPU\(s\) per kernel, 1 run\(s\) each$", said,
                     re.M), said
    seconds = r"median +\d+\.\d s \(min \d+\.\d to max \d+\.\d\); lost points in [01] of 1"
    for condition in ("alone, CPU limit", "alone, no CPU limit"):
        assert re.search(rf"^  {condition} +{seconds}$", said, re.M), said
    for condition in ("4 spinners beside, CPU limit", "4 spinners beside, no CPU limit"):
        assert re.search(rf"^  {condition} +{seconds}; neighbour's CPUs \d\.\d\d$", said, re.M), said

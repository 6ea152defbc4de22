"""The seccomp allow list: the BPF that libseccomp compiles does what seccomp.py says, for each
architecture, on every call number; the ordinary workloads (corpus.ORDINARY and the python_io
generator's programs) still run under it with the results plain CPython gives; and a pool that
cannot compile it says so loudly."""

from __future__ import annotations

import errno
import random
import struct

import pyseccomp
import pytest

from domains.programs import draw_input, draw_program
from domains.sandbox import IsolationError, Job, Limits, SandboxPool, canonical, seccomp
from domains.sandbox import pool as pool_module
from domains.sandbox.policy import check_program
from tests.sandbox.corpus import ORDINARY

LIMITS = Limits(cpu_seconds=2.0, wall_seconds=4.0)  # the ordinary workloads are not trivial
ALLOW, EPERM, KILL = pyseccomp.ALLOW, pyseccomp.ERRNO(errno.EPERM), pyseccomp.KILL_PROCESS
X32_BIT = 0x40000000


def _run_bpf(program: bytes, arch: int, number: int) -> tuple[int, int]:
    """A classic-BPF interpreter for the instructions libseccomp emits here: (action, how many
    instructions ran). Any other instruction fails the test."""
    code = [struct.unpack("HBBI", program[i:i + 8]) for i in range(0, len(program), 8)]
    pc, accumulator, steps = 0, 0, 0
    while True:
        op, jt, jf, k = code[pc]
        steps += 1
        if op == 0x20 and k in (0, 4):  # ld [k]: 0 the call number, 4 the architecture
            accumulator, pc = (arch if k == 4 else number), pc + 1
        elif op in (0x15, 0x25, 0x35, 0x45):  # jeq / jgt / jge / jset k
            taken = {0x15: accumulator == k, 0x25: accumulator > k, 0x35: accumulator >= k,
                     0x45: bool(accumulator & k)}[op]
            pc += 1 + (jt if taken else jf)
        elif op == 0x05:  # ja k
            pc += 1 + k
        elif op == 0x06:  # ret k
            return k, steps
        else:
            raise AssertionError(f"instruction {op:#x} at {pc}: not one this interpreter knows")


@pytest.mark.parametrize("machine", sorted(seccomp.ARCHITECTURES))
def test_the_filter_allows_the_list_refuses_file_lookups_and_kills_everything_else(machine):
    arch = getattr(pyseccomp.Arch, seccomp.ARCHITECTURES[machine])
    numbers = {name: pyseccomp.resolve_syscall(arch, name)
               for name in (*seccomp.ALLOWED, *seccomp.FILE_LOOKUPS)}
    assert all(numbers[name] >= 0 for name in seccomp.ALLOWED), numbers  # each exists there
    program = seccomp.allow_list_program(machine)
    expected = {numbers[name]: ALLOW for name in seccomp.ALLOWED}
    expected |= {numbers[name]: EPERM for name in seccomp.FILE_LOOKUPS if numbers[name] >= 0}
    runs = {n: _run_bpf(program, arch, n) for n in range(1024)}  # past every assigned number
    assert {n: action for n, (action, _) in runs.items()} == {
        n: expected.get(n, KILL) for n in range(1024)}
    assert max(steps for _, steps in runs.values()) <= 12  # a search tree, not a list
    other = pyseccomp.Arch.X86 if machine == "x86_64" else pyseccomp.Arch.ARM  # 32-bit calls
    assert _run_bpf(program, other, numbers["write"])[0] == KILL
    if machine == "x86_64":
        assert _run_bpf(program, arch, X32_BIT | numbers["write"])[0] == KILL  # x32


def test_a_machine_without_a_measured_list_is_refused_with_the_fix():
    with pytest.raises(seccomp.FilterUnavailable, match="no measured allow list for riscv64.*"
                                                        "bench/sandbox.py --syscalls"):
        seccomp.allow_list_program("riscv64")


def test_a_pool_that_cannot_compile_the_filter_stops_under_strict(monkeypatch):
    def unavailable(machine=None):
        raise seccomp.FilterUnavailable("libseccomp is not usable (test)")

    monkeypatch.setattr(pool_module, "allow_list_program", unavailable)
    with pytest.raises(IsolationError, match=r"seccomp: libseccomp is not usable \(test\)"):
        SandboxPool(LIMITS, workers=1).start()


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(LIMITS, workers=2) as started:
        yield started


def test_the_ordinary_workloads_pass_the_static_check_and_run_as_without_a_filter(pool):
    assert all(check_program(source) is None for _, source, *_ in ORDINARY)
    results = pool.run([Job(source, (args,)) for _, source, args, _, _ in ORDINARY])
    got = {name: (r.outcome, r.outputs) for (name, *_), r in zip(ORDINARY, results, strict=True)}
    assert got == {name: (outcome, outputs) for name, _, _, outcome, outputs in ORDINARY}
    warned = {name: r.stdout for (name, *_), r in zip(ORDINARY, results, strict=True)}
    assert "SyntaxWarning" in warned["syntax_warning"]  # shown, its source line not found
    assert "FutureWarning" in warned["future_warning_from_re"]


def test_the_generators_programs_return_what_they_return_in_this_process(pool):
    rng, jobs, expected = random.Random(0), [], []
    for level in range(1, 6):
        for _ in range(20):
            source, kind = draw_program(rng, level)
            args = [(draw_input(rng, kind),) for _ in range(3)]
            namespace: dict = {}
            exec(source, namespace)  # noqa: S102 - the project's own generator's programs
            jobs.append(Job(source, tuple(f"({canonical(a[0])},)" for a in args)))
            expected.append(("ok", tuple(canonical(namespace["f"](*a)) for a in args)))
    assert [(r.outcome, r.outputs) for r in pool.run(jobs)] == expected

"""The hostile corpus (tests/sandbox/corpus.py) runs in a real pool: each program is contained
with the right outcome, the host's files are unchanged, the parent and the workers are alive, and
the pool still serves correct results after it. Also: the static check, worker replacement, and
loud degradation where an isolation mechanism is missing. The filter itself: test_seccomp.py."""

from __future__ import annotations

import hashlib
import os
import signal
import threading
from pathlib import Path

import pytest

from domains.sandbox import (
    IsolationError,
    Job,
    Limits,
    SandboxIsolationWarning,
    SandboxPool,
)
from domains.sandbox import pool as pool_module
from domains.sandbox.jail import remove_tree
from domains.sandbox.policy import check_program
from tests.sandbox.corpus import HOSTILE, KILLED_BY_SECCOMP, NATIVE

LIMITS = Limits(cpu_seconds=0.5, wall_seconds=1.0)
CORRECT = [("def f(x): return x*3+1", "(4,)", "13"),
           ("def f(s): return sorted(set(s))", "('banana',)", "['a', 'b', 'n']"),
           ("def f(a, b): return {b: a, 'k': (a,)}", "(1, 'z')", "{'k': (1,), 'z': 1}")]


def _snapshot(*roots: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for root in roots for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """A fake data root with a catalog, a host folder with a file, and their snapshot."""
    base = tmp_path_factory.mktemp("host")
    data_root, outside = base / "data-root", base / "outside"
    data_root.mkdir()
    outside.mkdir()
    (data_root / "catalog.duckdb").write_bytes(b"catalog bytes")
    (outside / "keep.txt").write_text("keep me")
    return {"data_root": data_root, "outside": outside,
            "before": _snapshot(data_root, outside)}


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(LIMITS, workers=2) as started:
        yield started


@pytest.fixture(scope="module")
def corpus_results(pool, host):
    os.environ["FLYWHEEL_TEST_SECRET"] = "s3cret"  # the workers were started before: not theirs
    try:
        jobs = [Job(source.format(data_root=host["data_root"], outside=host["outside"]), ("(1,)",))
                for _, source, _, _ in HOSTILE]
        return dict(zip([name for name, *_ in HOSTILE], pool.run(jobs), strict=True))
    finally:
        del os.environ["FLYWHEEL_TEST_SECRET"]


def test_the_corpus_has_at_least_25_distinct_programs():
    names = [name for name, *_ in HOSTILE]
    assert len(names) >= 25 and len(set(names)) == len(names)


@pytest.mark.parametrize(("name", "expected", "outputs"),
                         [(name, expected, outputs) for name, _, expected, outputs in HOSTILE],
                         ids=[name for name, *_ in HOSTILE])
def test_each_hostile_program_is_contained_with_the_right_outcome(corpus_results, name, expected,
                                                                  outputs):
    result = corpus_results[name]
    assert result.outcome in expected.split("|"), (result.outcome, result.error)
    if outputs is not None:
        assert result.outputs == outputs, result
    assert "s3cret" not in repr(result) and "catalog bytes" not in repr(result)


def test_the_calls_outside_the_allow_list_end_the_program_by_sigsys(corpus_results):
    # Not stopped earlier by something else (the control, native code's allowed call, is ok)
    assert {name: corpus_results[name].error for name in KILLED_BY_SECCOMP} == {
        name: "system call refused (SIGSYS)" for name in KILLED_BY_SECCOMP}
    assert corpus_results["ctypes_through_the_workers_modules"].outputs == ("8",)


SHARED_MEMORY = NATIVE + ("libc.shmat.restype = ctypes.c_void_p\ndef f(x):\n"
                          "    segment = libc.shmget(0x5EC, 4096, {flags})\n"
                          "    address = libc.shmat(segment, None, 0)\n{body}")


def test_a_program_cannot_leave_state_for_the_next_in_system_v_shared_memory():
    # The deny list allowed shmget: the second program read 'left by the last program'
    write = SHARED_MEMORY.format(flags="0o1666", body="    ctypes.memmove(address, "
                                 "b'left by the last program', 24)\n    return segment")
    read = SHARED_MEMORY.format(flags="0", body="    return ctypes.string_at(address, 24)"
                                ".decode() if segment >= 0 else segment")
    with SandboxPool(LIMITS, workers=1) as one_worker:  # both in the same IPC namespace
        results = one_worker.run([Job(write, ("(1,)",)), Job(read, ("(1,)",))])
    assert [(r.outcome, r.error) for r in results] == [
        ("forbidden", "system call refused (SIGSYS)")] * 2, results


def test_the_host_is_unharmed_and_the_pool_still_serves(corpus_results, pool, host):
    assert _snapshot(host["data_root"], host["outside"]) == host["before"]
    assert not (host["outside"] / "pwned").exists() and not Path("/evil").exists()
    os.kill(os.getpid(), 0)  # the parent is alive (it would not get here otherwise)
    assert pool.replaced == 0  # no program took a worker down
    assert all(w.process.poll() is None for w in pool._workers)
    results = pool.run([Job(source, (args,)) for source, args, _ in CORRECT] * 4)
    assert [r.outputs for r in results] == [(want,) for _, _, want in CORRECT] * 4


def test_a_patched_builtin_does_not_leak_into_the_next_program(pool):
    patch = Job("import builtins\nbuiltins.abs = lambda x: 99\ndef f(x): return abs(x)", ("(-2,)",))
    clean = Job("def f(x): return abs(x)", ("(-2,)",))
    results = pool.run([patch, clean, clean, clean])
    assert [r.outputs for r in results] == [("99",), ("2",), ("2",), ("2",)]


def test_every_mechanism_is_on_here(pool):
    assert pool.mechanisms == {name: "on" for name in (
        "seccomp", "mount_namespace", "network_namespace", "pid_namespace", "filesystem",
        "uid_drop", "rlimits")}


STATICALLY_ADMITTED = {"infinite_loop", "loop_swallowing_exceptions", "huge_integer",
                       "huge_integer_text", "memory_bomb", "memory_bomb_gradual", "deep_recursion",
                       "huge_output", "huge_return", "forge_the_result_on_stdout"}


def test_the_static_check_refuses_everything_that_reaches_outside_a_pure_function():
    admitted = {name for name, source, _, _ in HOSTILE
                if check_program(source.format(data_root="/d", outside="/o")) is None}
    assert admitted == STATICALLY_ADMITTED


def test_a_worker_killed_mid_batch_is_replaced_and_its_jobs_are_crashes():
    with SandboxPool(LIMITS, workers=1) as pool:
        pool.start()
        victim = pool._workers[0].process.pid
        timer = threading.Timer(0.3, os.killpg, (victim, signal.SIGKILL))
        timer.start()
        busy = "def f(x):\n    while True:\n        pass"  # 0.5 s of CPU: still running at 0.3 s
        lost = pool.run([Job(busy, ("(1,)",))])
        timer.join()
        assert lost[0].outcome == "crash" and "worker lost" in lost[0].error, lost
        assert pool.replaced == 1 and pool._workers[0].process.pid != victim
        assert pool.run([Job("def f(x): return x", ("(7,)",))])[0].outputs == ("7",)


def test_a_worker_that_died_between_batches_is_replaced_before_the_next():
    with SandboxPool(LIMITS, workers=1) as pool:
        pool.start()
        os.killpg(pool._workers[0].process.pid, signal.SIGKILL)
        pool._workers[0].process.wait()
        assert pool.run([Job("def f(x): return x", ("(1,)",))])[0].outputs == ("1",)
        assert pool.replaced == 1


def test_a_worker_that_stops_answering_is_killed_and_replaced():
    with SandboxPool(LIMITS, workers=1) as pool:
        pool.start()
        pool.answer_slack_seconds = 0.5
        stuck = pool._workers[0]
        os.killpg(stuck.process.pid, signal.SIGSTOP)
        lost = pool.run([Job("def f(x): return x", ("(1,)",))])
        assert lost[0].outcome == "crash" and "in time" in lost[0].error
        assert stuck.process.poll() is not None and pool.replaced == 1
        assert pool.run([Job("def f(x): return x", ("(7,)",))])[0].outputs == ("7",)


class _HalfIsolatedWorker:
    mechanisms = {"seccomp": "on", "network_namespace": "missing: unshare failed (EPERM)"}

    def __init__(self, limits, program, missing):
        self.killed = False

    def kill(self):
        self.killed = True


def test_a_missing_mechanism_stops_a_strict_pool(monkeypatch):
    monkeypatch.setattr(pool_module, "_Worker", _HalfIsolatedWorker)
    with pytest.raises(IsolationError, match="network_namespace: unshare failed.*= 'warn'"):
        SandboxPool(LIMITS, workers=1).start()


def test_a_missing_mechanism_warns_loudly_under_warn(monkeypatch, caplog):
    monkeypatch.setattr(pool_module, "_Worker", _HalfIsolatedWorker)
    pool = SandboxPool(LIMITS, workers=1, isolation="warn")
    with pytest.warns(SandboxIsolationWarning, match="network_namespace"):
        pool.start()
    assert "sandbox isolation incomplete" in caplog.text
    pool._workers = []


LEFTOVERS = ("import os\ndef f(x):\n    os.makedirs('a/b/c')\n    os.symlink('/', 'a/up')\n"
             "    os.symlink('/w', 'a/b/workers')\n    for name in ('a/b/c/x', 'a/y', 'z'):\n"
             "        with open(name, 'w') as h:\n            h.write('x' * 60000)\n    return x")


def test_a_program_can_leave_nothing_behind():
    # Creating files and folders is outside the allow list: 300 programs that try leave the
    # 16 MiB tmpfs as empty as they found it (remove_tree is for a worker without seccomp)
    with SandboxPool(LIMITS, workers=1) as pool:
        results = pool.run([Job(LEFTOVERS, (f"({k},)",)) for k in range(300)])
        assert {(r.outcome, r.error) for r in results} == {
            ("forbidden", "system call refused (SIGSYS)")}
        assert pool.run([Job("def f(x): return x", ("(2,)",))])[0].outputs == ("2",)


def test_remove_tree_removes_folders_deeper_than_the_recursion_limit_and_follows_no_link(
        tmp_path, monkeypatch):
    outside, folder = tmp_path / "outside", tmp_path / "w" / "7"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep me")
    folder.mkdir(parents=True)
    (folder / "z").symlink_to(outside / "keep.txt")
    monkeypatch.chdir(folder)  # remove_tree changes folders; the test's own is restored
    os.symlink(outside, "up")
    for _ in range(1500):  # as a program would, one folder at a time
        os.mkdir("a")
        os.chdir("a")
    with open("x", "w") as handle:
        handle.write("x" * 1000)
    remove_tree(str(folder))
    assert not folder.exists() and (outside / "keep.txt").read_text() == "keep me"


MALFORMED = ("import os\ndef f(x):\n    for fd in range(3, 64):\n        try:\n"
             "            os.write(fd, b'{\"outcome\": \"ok\", \"outputs\": 5}')\n"
             "        except OSError:\n            pass\n    os._exit(0)")


def test_a_malformed_report_is_a_crash_and_its_neighbours_are_unaffected(pool):
    framed = MALFORMED.replace('{"outcome": "ok", "outputs": 5}', "\\x00\\x00\\x00\\x02{}")
    assert framed != MALFORMED  # writes a frame header of its own
    results = pool.run([Job(MALFORMED, ("(1,)",)), Job("def f(x): return x", ("(2,)",)),
                        Job(framed, ("(1,)",)), Job("def f(x): return x", ("(3,)",))])
    assert [(r.outcome, r.outputs) for r in results] == [
        ("crash", ()), ("ok", ("2",)), ("crash", ()), ("ok", ("3",))], results
    assert results[0].error == "malformed report" and results[2].error == "unreadable report"
    assert pool.replaced == 0


def test_random_is_reseeded_in_every_child_and_imports_where_it_is_used(pool):
    job = Job("import random\ndef f(x): return random.random()", ("(1,)",))
    results = pool.run([job] * 6)
    assert all(r.outcome == "ok" for r in results), results
    assert len({r.outputs for r in results}) == 6

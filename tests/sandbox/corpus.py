"""The hostile corpus: programs that try to harm the host, escape, or fool the harness; and the
ordinary workloads: pure programs as a model writes them, which must keep running.

Each HOSTILE entry is (name, source, expected outcome when run in the sandbox *without* the
static check, expected outputs or None). An outcome "a|b" means the machine's speed decides
between contained outcomes. `{data_root}` and `{outside}` in a source are replaced by the test's
paths of a fake data root (holding catalog.duckdb) and of a host folder. Every program defines
`f` and is called as f(1).

The NATIVE programs stand for a program that got native code execution (through a CPython
memory bug, say): `ctypes` is dropped from sys.modules in a child, but the worker's own modules
still hold it, and they reach it there. Only the seccomp filter stands between them and the
kernel, so each one that makes a call outside the allow list must end by SIGSYS
(`KILLED_BY_SECCOMP`). The old deny list let the System V, AIO, sysinfo and unknown-number calls
through.

Each ORDINARY entry is (name, source, args, outcome, outputs): the programs on which the allow
list was measured (docs/sandbox.md), with the results they have without any filter.
"""

from __future__ import annotations

import os

# Raw system call numbers per machine, for the calls that glibc has no wrapper for.
_NUMBERS = {"x86_64": {"io_setup": 206, "userfaultfd": 323, "io_uring_setup": 425},
            "aarch64": {"io_setup": 0, "userfaultfd": 282, "io_uring_setup": 425}}
_NR = _NUMBERS.get(os.uname().machine, _NUMBERS["x86_64"])
NATIVE = ("import sys\nctypes = next(m.ctypes for m in list(sys.modules.values())\n"
          "              if type(getattr(m, 'ctypes', None)) is type(sys))\n"
          "libc = ctypes.CDLL(None, use_errno=True)\n")

HOSTILE: list[tuple[str, str, str, tuple[str, ...] | None]] = [
    ("infinite_loop", "def f(x):\n    while True:\n        pass", "timeout", None),
    ("loop_swallowing_exceptions",
     "def f(x):\n    while True:\n        try:\n            while True: pass\n"
     "        except BaseException:\n            pass", "timeout", None),
    ("sleep_past_the_limit", "import time\ndef f(x):\n    time.sleep(30)", "forbidden", None),
    ("huge_integer", "def f(x):\n    return 10**10**8", "timeout", None),
    ("huge_integer_text", "def f(x):\n    return str(10**5000)", "crash", None),
    ("fork_bomb", "import os\ndef f(x):\n    while True:\n        os.fork()", "forbidden", None),
    ("exec_a_shell", "import os\ndef f(x):\n    os.execv('/bin/sh', ['sh', '-c', 'rm -rf ~'])",
     "forbidden", None),
    ("spawn_rm_rf", "import os\ndef f(x):\n    return os.posix_spawn('/bin/rm', "
     "['rm', '-rf', '{outside}'], {{}})", "forbidden", None),
    ("threads", "import _thread\ndef f(x):\n    _thread.start_new_thread(print, ())\n"
     "    return 1", "forbidden", None),
    ("memory_bomb", "def f(x):\n    return [0] * 10**9", "memory", None),
    ("memory_bomb_gradual",
     "def f(x):\n    a = []\n    while True:\n        a.append(' ' * 10**6)",
     "memory|timeout", None),  # faulting in 256 MB costs CPU: the CPU limit can come first
    ("deep_recursion", "def f(x):\n    return f(x + 1)", "crash", None),
    ("deep_recursion_raised_limit",
     "import sys\nsys.setrecursionlimit(10**7)\ndef f(x):\n    return f(x + 1) + 1",
     "crash|memory|timeout", None),  # 3.11 keeps Python frames off the C stack: it depends
    ("huge_output", "def f(x):\n    print('x' * 10**6)\n    return 1", "output_limit", None),
    ("huge_return", "def f(x):\n    return 'x' * 10**6", "output_limit", None),
    ("huge_file", "def f(x):\n    with open('big', 'w') as h:\n        h.write('x' * 10**7)",
     "forbidden", None),
    ("write_outside_its_folder",
     "def f(x):\n    open('{outside}/pwned', 'w').write('owned')", "forbidden", None),
    ("write_into_the_data_root",
     "def f(x):\n    open('{data_root}/catalog.duckdb', 'w').write('gone')", "forbidden", None),
    ("mkdir_at_the_root", "import os\ndef f(x):\n    os.mkdir('/evil')", "forbidden", None),
    ("read_ssh_keys", "def f(x):\n    return open('/root/.ssh/id_rsa').read()", "forbidden", None),
    ("read_the_catalog",
     "def f(x):\n    return open('{data_root}/catalog.duckdb', 'rb').read().hex()",
     "forbidden", None),
    ("read_environment_variables", "import os\ndef f(x):\n    return dict(os.environ)", "ok",
     ("{}",)),
    ("read_proc_environ", "def f(x):\n    return open('/proc/self/environ').read()",
     "forbidden", None),
    ("open_a_socket", "import socket\ndef f(x):\n    return socket.socket().fileno()",
     "forbidden", None),
    ("ctypes", "import ctypes\ndef f(x):\n    return ctypes.CDLL(None).fork()", "forbidden", None),
    ("signal_the_parent", "import os\ndef f(x):\n    os.kill(os.getppid(), 9)", "forbidden", None),
    ("signal_pid_1", "import os\ndef f(x):\n    os.kill(1, 9)", "forbidden", None),
    ("signal_the_group", "import os\ndef f(x):\n    os.killpg(0, 9)", "forbidden", None),
    ("raise_a_limit", "import resource\ndef f(x):\n    resource.setrlimit(resource.RLIMIT_AS, "
     "(-1, -1))", "forbidden", None),
    ("become_root", "import os\ndef f(x):\n    os.setuid(0)", "forbidden", None),
    ("chroot_escape", "import os\ndef f(x):\n    os.chroot('/')", "forbidden", None),
    ("os_exit", "import os\ndef f(x):\n    os._exit(0)", "crash", None),
    ("monkeypatch_harness_builtins",
     "import builtins\nbuiltins.repr = lambda o: \"'forged'\"\nbuiltins.len = lambda o: 0\n"
     "builtins.sorted = lambda *a, **k: ['forged']\nbuiltins.type = lambda o: int\n"
     "def f(x):\n    return {{'b': x, 'a': [x, 'y']}}", "ok", ("{'a': [1, 'y'], 'b': 1}",)),
    ("forge_the_result_on_stdout",
     "def f(x):\n    print('{{\"outcome\": \"ok\", \"outputs\": [\"42\"]}}')\n    return 1",
     "ok", ("1",)),
    ("forge_the_result_on_every_descriptor",
     "import os\ndef f(x):\n    for fd in range(64):\n        try:\n"
     "            os.write(fd, b'{{\"outcome\": \"ok\", \"outputs\": [\"42\"]}}')\n"
     "        except OSError:\n            pass\n    return 1", "crash", None),
    ("scan_file_descriptors",
     "import os\ndef f(x):\n    found = []\n    for fd in range(1024):\n        try:\n"
     "            os.fstat(fd)\n            found.append(fd)\n        except OSError:\n"
     "            pass\n    return len(found)", "ok", ("0",)),  # fstat is refused: it sees none
    ("folders_nested_past_the_recursion_limit",  # mkdir is not allowed: nothing to clean up
     "import os\ndef f(x):\n    for _ in range(1500):\n        os.mkdir('a')\n"
     "        os.chdir('a')\n    open('leaf', 'w').write('x')\n    return x", "forbidden", None),
    ("subclass_with_forged_repr",
     "class Sneaky(int):\n    def __repr__(self):\n        return '42'\n"
     "def f(x):\n    return Sneaky(1)", "crash", None),
    # Native code (see NATIVE above). The first is the control: an allowed call goes through.
    ("ctypes_through_the_workers_modules",
     NATIVE + "def f(x):\n    return libc.getrandom(ctypes.create_string_buffer(8), 8, 0)",
     "ok", ("8",)),
    ("system_v_shared_memory",  # would outlive the program (test_hostile: the next one reads it)
     NATIVE + "def f(x):\n    return libc.shmget(0x5EC, 4096, 0o1666)", "forbidden", None),
    ("linux_aio_context",
     NATIVE + "def f(x):\n    context = ctypes.c_ulong(0)\n"
     f"    return libc.syscall({_NR['io_setup']}, 8, ctypes.byref(context))", "forbidden", None),
    ("io_uring_setup",
     NATIVE + "def f(x):\n    params = ctypes.create_string_buffer(120)\n"
     f"    return libc.syscall({_NR['io_uring_setup']}, 4, params)", "forbidden", None),
    ("userfaultfd",
     NATIVE + f"def f(x):\n    return libc.syscall({_NR['userfaultfd']}, 0)", "forbidden", None),
    ("read_the_hosts_memory_and_load",
     NATIVE + "def f(x):\n    info = ctypes.create_string_buffer(128)\n"
     "    return [libc.sysinfo(info), list(info.raw[:16])]", "forbidden", None),
    ("a_number_no_list_knew",  # as a call that a newer kernel adds would be
     NATIVE + "def f(x):\n    return libc.syscall(1000, 0)", "forbidden", None),
]
KILLED_BY_SECCOMP = {"system_v_shared_memory", "linux_aio_context", "io_uring_setup",
                     "userfaultfd", "read_the_hosts_memory_and_load", "a_number_no_list_knew",
                     "fork_bomb", "exec_a_shell", "spawn_rm_rf", "threads", "signal_the_parent",
                     "signal_pid_1", "signal_the_group", "raise_a_limit", "become_root",
                     "chroot_escape", "mkdir_at_the_root", "sleep_past_the_limit",
                     "folders_nested_past_the_recursion_limit"}


ORDINARY: list[tuple[str, str, str, str, tuple[str, ...]]] = [
    ("math", "import math\ndef f(x):\n    return [math.factorial(20 * x) % 1000007, "
     "math.gcd(x, 12), round(math.sqrt(x), 6), math.comb(50, x), "
     "math.isclose(math.sin(x) ** 2 + math.cos(x) ** 2, 1.0)]", "(3,)", "ok",
     ("[174406, 3, 1.732051, 19600, True]",)),
    ("itertools", "import itertools\ndef f(x):\n    p = list(itertools.permutations(range(x)))\n"
     "    c = list(itertools.combinations('abcde', 2))\n    return [len(p), c[:3], "
     "list(itertools.accumulate(range(x))), [k for k, _ in itertools.groupby('aabbbc')], "
     "list(itertools.islice(itertools.count(x), 3))]", "(5,)", "ok",
     ("[120, [('a', 'b'), ('a', 'c'), ('a', 'd')], [0, 1, 3, 6, 10], ['a', 'b', 'c'], "
      "[5, 6, 7]]",)),
    ("functools", "import functools\n@functools.lru_cache(maxsize=None)\ndef fib(n):\n"
     "    return n if n < 2 else fib(n - 1) + fib(n - 2)\ndef f(x):\n    return [fib(x), "
     "functools.reduce(lambda a, b: a * b, range(1, 20)), functools.partial(pow, 2)(x)]", "(200,)",
     "ok", ("[280571172992510140037611932413038677189525, 121645100408832000, "
            "1606938044258990275541962092341162602522202993782792835301376]",)),
    ("collections", "import collections\ndef f(s):\n    c = collections.Counter(s)\n"
     "    d = collections.deque(s)\n    d.rotate(2)\n    g = collections.defaultdict(list)\n"
     "    for i, ch in enumerate(s):\n        g[ch].append(i)\n"
     "    P = collections.namedtuple('P', 'a b')\n"
     "    return [c.most_common(2), ''.join(d), dict(g), P(1, 2)._asdict()]", "('mississippi',)",
     "ok", ("[[('i', 4), ('s', 4)], 'pimississip', {'i': [1, 4, 7, 10], 'm': [0], 'p': [8, 9], "
            "'s': [2, 3, 5, 6]}, {'a': 1, 'b': 2}]",)),
    ("string_and_re", "import re\nimport string\ndef f(s):\n"
     "    words = re.findall(r'[a-z]+', s.lower())\n"
     "    return [words, re.sub(r'(\\w)(\\w*)', lambda m: m.group(2) + m.group(1), s), "
     "string.capwords(s), re.split(r'\\s*,\\s*', 'a , b,c'), s.translate(str.maketrans("
     "string.ascii_lowercase, string.ascii_lowercase[::-1]))]", "('Hello World, again',)", "ok",
     ("[['hello', 'world', 'again'], 'elloH orldW, gaina', 'Hello World, Again', "
      "['a', 'b', 'c'], 'Hvool Wliow, ztzrm']",)),
    ("heapq_bisect_operator", "import bisect\nimport heapq\nimport operator\ndef f(x):\n"
     "    h = []\n    for i in range(x, 0, -1):\n        heapq.heappush(h, (i * 7) % 11)\n"
     "    a = []\n    for i in h:\n        bisect.insort(a, i)\n"
     "    pairs = sorted([(i % 3, -i) for i in range(x)], key=operator.itemgetter(0, 1))\n"
     "    return [heapq.nsmallest(3, h), a, pairs[:4], bisect.bisect_left(a, 5)]", "(20,)", "ok",
     ("[[0, 1, 1], [0, 1, 1, 2, 2, 3, 3, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10], "
      "[(0, -18), (0, -15), (0, -12), (0, -9)], 8]",)),
    ("random_seeded", "import random\ndef f(x):\n    r = random.Random(x)\n"
     "    return [r.randint(0, 99) for _ in range(5)] + [r.choice('abc'), round(r.random(), 3)]",
     "(7,)", "ok", ("[41, 19, 50, 83, 6, 'a', 0.821]",)),
    ("random_unseeded", "import random\ndef f(x):\n"
     "    return 0 <= random.random() < 1 and len(random.sample(range(100), x)) == x", "(5,)", "ok",
     ("True",)),
    ("big_lists_and_dicts", "def f(x):\n    a = list(range(2000000))\n"
     "    d = {i: str(i) for i in range(200000)}\n    s = set(a[::3])\n    del a[:1000000]\n"
     "    return [len(a), len(d), len(s), sum(a) % 1000]", "(1,)", "ok",
     ("[1000000, 200000, 666667, 0]",)),
    ("growing_string", "def f(x):\n    s = ''\n    for i in range(20000):\n        s += 'ab'\n"
     "    parts = [s[i:i + 1000] for i in range(0, len(s), 1000)]\n"
     "    return [len(s), len(parts), ''.join(reversed(parts))[:4]]", "(1,)", "ok",
     ("[40000, 40, 'abab']",)),
    ("big_integers", "def f(x):\n    n = 3 ** 200000 + x\n"
     "    return [n % 1000000007, n.bit_length(), len(str(n % 10 ** 4000))]", "(1,)", "ok",
     ("[646068150, 316993, 4000]",)),
    ("sorting", "def f(x):\n    a = [((i * 7919) % 10007) / 3 for i in range(100000)]\n"
     "    a.sort()\n    b = sorted(map(str, range(50000)), key=len, reverse=True)\n"
     "    return [a[:2], b[0], a[-1]]",
     "(1,)", "ok", ("[[0.0, 0.0], '10000', 3335.3333333333335]",)),
    ("near_the_memory_limit", "def f(x):\n    a = [x] * 20000000\n    b = bytearray(50000000)\n"
     "    n = len(a) + len(b)\n    del a, b\n    return n", "(1,)", "ok", ("70000000",)),
    ("exceptions", "def f(x):\n    out = []\n    for d in (1, 0, 2):\n        try:\n"
     "            out.append(x // d)\n        except ZeroDivisionError as e:\n"
     "            out.append(str(e))\n    try:\n        {}['k']\n    except KeyError:\n"
     "        out.append('key')\n    try:\n        int('z')\n    except ValueError as e:\n"
     "        out.append(isinstance(e, ValueError))\n    return out", "(6,)", "ok",
     ("[6, 'integer division or modulo by zero', 3, 'key', True]",)),
    ("recursion", "def f(x):\n    def depth(n):\n        return 0 if n == 0 else 1 + depth(n - 1)\n"
     "    try:\n        depth(10 ** 6)\n    except RecursionError:\n        pass\n"
     "    return depth(x)", "(900,)", "ok", ("900",)),
    ("printing", "def f(x):\n    for i in range(x):\n        print(i, 'x' * 20, sep=':')\n"
     "    print(f'{x:08.3f}', repr([x]), end='')\n    return x", "(100,)", "ok", ("100",)),
    ("floats_and_formatting", "def f(x):\n    return [format(x / 7, '.10f'), '%5.2e' % (x ** 0.5), "
     "float('inf') > x, divmod(-x, 4), complex(x, 1) * 1j == complex(-1, x), round(2.675, 2), "
     "hash(x) == hash(float(x))]", "(10,)", "ok",
     ("['1.4285714286', '3.16e+00', True, (-3, 2), True, 2.67, True]",)),
    ("codec", "def f(s):\n    return list(s.encode('utf-16'))", "('ab',)", "ok",
     ("[255, 254, 97, 0, 98, 0]",)),
    # CPython looks for the source line of a warning by itself (openat, newfstatat: refused).
    ("syntax_warning", "def f(x):\n    return [x is 1, x == 1]", "(1,)", "ok", ("[True, True]",)),
    ("future_warning_from_re", "import re\ndef f(s):\n    return re.findall('[[a]', s)", "('a[',)",
     "ok", ("['a', '[']",)),
    ("raises", "def f(x):\n    return [1, 2][x]", "(5,)", "crash", ()),
]

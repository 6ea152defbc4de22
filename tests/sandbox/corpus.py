"""The hostile corpus: programs that try to harm the host, escape, or fool the harness.

Each entry is (name, source, expected outcome when run in the sandbox *without* the static
check, expected outputs or None). An outcome "a|b" means the machine's speed decides between
contained outcomes. `{data_root}` and `{outside}` in a source are replaced by the test's paths of
a fake data root (holding catalog.duckdb) and of a host folder. Every program defines `f` and is
called as f(1).
"""

from __future__ import annotations

HOSTILE: list[tuple[str, str, str, tuple[str, ...] | None]] = [
    ("infinite_loop", "def f(x):\n    while True:\n        pass", "timeout", None),
    ("loop_swallowing_exceptions",
     "def f(x):\n    while True:\n        try:\n            while True: pass\n"
     "        except BaseException:\n            pass", "timeout", None),
    ("sleep_past_the_limit", "import time\ndef f(x):\n    time.sleep(30)", "timeout", None),
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
     "def f(x):\n    a = []\n    while True:\n        a.append(' ' * 10**6)", "memory", None),
    ("deep_recursion", "def f(x):\n    return f(x + 1)", "crash", None),
    ("deep_recursion_raised_limit",
     "import sys\nsys.setrecursionlimit(10**7)\ndef f(x):\n    return f(x + 1) + 1",
     "crash|memory|timeout", None),  # 3.11 keeps Python frames off the C stack: it depends
    ("huge_output", "def f(x):\n    print('x' * 10**6)\n    return 1", "output_limit", None),
    ("huge_return", "def f(x):\n    return 'x' * 10**6", "output_limit", None),
    ("huge_file", "def f(x):\n    with open('big', 'w') as h:\n        h.write('x' * 10**7)",
     "output_limit", None),
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
     "            pass\n    return len(found)", "ok", ("4",)),
    ("folders_nested_past_the_recursion_limit",  # its cleanup must not take the worker down
     "import os\ndef f(x):\n    for _ in range(1500):\n        os.mkdir('a')\n"
     "        os.chdir('a')\n    open('leaf', 'w').write('x')\n    return x", "ok", ("1",)),
    ("subclass_with_forged_repr",
     "class Sneaky(int):\n    def __repr__(self):\n        return '42'\n"
     "def f(x):\n    return Sneaky(1)", "crash", None),
]

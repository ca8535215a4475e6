"""Where a sweep's tasks run: this process, a local process pool, or Ray.

`reproduce`, `incentives` and `compare` (its headroom report and its training runs) hand their
independent, seeded tasks to an `Executor`, chosen by two options:

- no `--address`: `--jobs` processes on this machine (`--jobs 1`: in this process);
- `--address local`: a local Ray started with `--jobs` CPUs (what a test or a first try of Ray uses);
- `--address auto`, `HOST:PORT` or `ray://HOST:10001`: an existing Ray cluster, every CPU of it
  (`--jobs` is then not used; each task takes one CPU, a training run one per torch thread).

A command that maps in stages (`reproduce`: its capacity runs, then its points, then its figures)
opens `Executor.session()` around them, so that every stage's tasks go to the same process pool,
whose workers start once (forked from the command's process where that is safe, its imports kept).

Every task is seeded and returns its result, so the rows do not depend on where or in which order
the tasks ran: the results come back in the order of the tasks whichever executor ran them. On a
cluster, each node must have the project installed (the same commit), and a task reads its inputs
(a trace file) and writes its outputs (compare's models under `--logdir`) at the paths it is given,
on its node: give paths that every node shares.

A task's error is raised here as the task raised it (a `ValueError` or `OSError` is then the
command's one-line error, as without Ray); a task that Ray could not run (a worker or node lost)
or could not load (the project missing on a node) raises `TaskFailed`, one line naming the task. On
an error or Ctrl-C the tasks not started are dropped; on an error the running ones are awaited and
passed to `on_done` when they succeed (on Ray, as many run at once as the cluster has CPUs for).
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import threading
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from itertools import islice
from typing import Any, Callable, Iterator, Sequence

from .errors import TaskFailed, UsageError

LOCAL_RAY = "local"
"""`--address` value that starts a local Ray with `--jobs` CPUs."""
_IMPORT_FAILED = "The remote function failed to import on the worker"
"""How Ray 2.x words a task whose function a worker cannot import (a RuntimeError, no type of its own)."""


def _nothing(*_: object) -> None:
    pass


@dataclass(frozen=True)
class Executor:
    """Runs `fn(*task)` for each task: `jobs` processes on this machine without `address`, else on
    Ray (`address` "local": a local Ray with `jobs` CPUs; any other: the cluster there)."""

    jobs: int = 1
    address: str | None = None
    pool: ProcessPoolExecutor | None = field(default=None, compare=False, repr=False)
    """The process pool of an open `session`, which every `map` shares (None: each `map` starts its own)."""

    def where(self) -> str:
        """Where the tasks run, for a command's output."""
        if self.address is None:
            return "this process" if self.jobs == 1 else f"{self.jobs} processes"
        if self.address == LOCAL_RAY:
            return f"a local Ray with {self.jobs} CPUs"
        return f"the Ray cluster at {self.address}"

    @property
    def inline(self) -> bool:
        """True when the tasks run one after the other in this process (progress bars can show)."""
        return self.address is None and self.jobs == 1

    @contextmanager
    def session(self, fork: bool = False) -> Iterator[Executor]:
        """This executor with one process pool that every `map` in the block shares, its workers
        started once and stopped at the end; itself where the tasks run in this process, on Ray or
        in a session already open. `fork`: fork the workers now from this process, its imports
        kept, where that is safe (`_forks`); else, and by default, they start afresh (spawn). On Ray,
        it connects now: a bad `--address` (UsageError) is refused before the command shows progress."""
        if self.address is not None:
            _connect(self)
        if self.inline or self.address is not None or self.pool is not None:
            yield self
            return
        method = "fork" if fork and _forks() else "spawn"
        with ProcessPoolExecutor(self.jobs, mp_context=multiprocessing.get_context(method)) as pool:
            if method == "fork":
                pool.submit(int).result()  # forks every worker now, before a thread can start here
            yield replace(self, pool=pool)

    def map(self, fn: Callable[..., Any], tasks: Sequence[tuple], on_done: Callable[[int, Any], object] = _nothing,
            cpus: int = 1) -> list:
        """`fn(*task)` of every task, in the order of `tasks`; `on_done(i, result)` as task i finishes
        (in completion order). `cpus`: the CPUs one task takes on Ray."""
        results: dict[int, Any] = {}

        def done(i: int, result: Any) -> None:
            results[i] = result
            on_done(i, result)

        if self.inline:
            for i, task in enumerate(tasks):
                done(i, fn(*task))
        elif self.address is None:
            with self.session() as session:
                _run_pool(fn, tasks, session.pool, done)
        else:
            _run_ray(fn, tasks, self, cpus, done)
        return [results[i] for i in range(len(tasks))]


def add_address_argument(parser: argparse.ArgumentParser) -> None:
    """`--address`: run the tasks on Ray (see the module docstring)."""
    parser.add_argument("--address", default=None,
                        help=f"run the tasks on Ray: {LOCAL_RAY} (a local Ray with --jobs CPUs), auto, HOST:PORT or "
                        "ray://HOST:10001 (an existing cluster, all its CPUs); needs the rllib extra (default: "
                        "--jobs processes on this machine)")


def executor_of(args: argparse.Namespace) -> Executor:
    """The executor of parsed `--jobs` and `--address`."""
    return Executor(args.jobs, args.address)


def _forks() -> bool:
    """Whether a pool may fork its workers from this process: on Linux (elsewhere a fork may copy
    system frameworks' state), while no other thread runs here (a fork copies none: one holding a
    lock, a progress bar's or a Ray session's, would leave it held in the workers). A process that
    holds torch's threads, which the threading module does not see, must not ask."""
    return sys.platform.startswith("linux") and threading.active_count() == 1


def _run_pool(fn: Callable[..., Any], tasks: Sequence[tuple], pool: ProcessPoolExecutor,
              done: Callable[[int, Any], None]) -> None:
    pending = {pool.submit(fn, *task): i for i, task in enumerate(tasks)}
    try:
        for future in as_completed(list(pending)):
            done(pending.pop(future), future.result())
    except BaseException:
        for future in pending:  # those not started; the running ones are awaited below
            future.cancel()
        for future, i in pending.items():
            if not future.cancelled() and future.exception() is None:
                done(i, future.result())
        raise


def _run_ray(fn: Callable[..., Any], tasks: Sequence[tuple], executor: Executor, cpus: int,
             done: Callable[[int, Any], None]) -> None:
    """As `_run_pool`, on Ray: as many tasks in flight as the cluster's CPUs hold, so that on an error
    the tasks in flight are the running ones, awaited (and kept when they succeed) before it is
    raised; Ctrl-C cancels them."""
    ray = _connect(executor)
    remote = ray.remote(fn).options(num_cpus=cpus)
    slots = max(1, int(ray.cluster_resources().get("CPU", 1) // cpus))
    queued = iter(enumerate(tasks))
    pending: dict[Any, int] = {}
    error: BaseException | None = None
    try:
        while True:
            if error is None:
                pending.update((remote.remote(*task), i) for i, task in islice(queued, slots - len(pending)))
            if not pending:
                break
            [ref], _ = ray.wait(list(pending), num_returns=1)
            i = pending.pop(ref)
            try:
                done(i, ray.get(ref))
            except ray.exceptions.RayError as e:
                error = error or _task_error(e, f"{fn.__name__}{tasks[i]!r}", executor)
    except BaseException:
        for ref in pending:
            ray.cancel(ref)
        raise
    if error is not None:
        raise error


def _task_error(error: BaseException, task: str, executor: Executor) -> BaseException:
    """What a failed Ray task raises here: the task's own exception, as a process pool raises it
    (Ray's wrapper, with the remote traceback, attached as its cause), or TaskFailed."""
    import ray

    if isinstance(error, ray.exceptions.RayTaskError):
        if _IMPORT_FAILED in str(error.cause):
            failed = TaskFailed(f"task {task} could not be loaded on {executor.where()} ({_last_line(error)}): "
                                "every node needs the project installed")
        elif isinstance(error.cause, BaseException):
            failed = error.cause
        else:
            return error
    else:
        failed = TaskFailed(f"task {task} did not run on {executor.where()}: {type(error).__name__}: "
                            f"{_first_line(error)}")
    failed.__cause__ = error
    return failed


def _connect(executor: Executor):
    """Ray, connected as `executor` says; UsageError when Ray is missing or unreachable."""
    try:
        import ray
    except ModuleNotFoundError:
        raise UsageError('--address needs Ray, the "rllib" extra: pip install -e ".[rllib]" (setup.sh installs it)') \
            from None
    from agents.ray_session import init_ray

    local = executor.address == LOCAL_RAY
    try:
        init_ray(None if local else executor.address, executor.jobs if local else None)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise UsageError(f"--address {executor.address}: cannot start or reach Ray: {_first_line(e)}") from None
    return ray


def _lines(error: BaseException) -> list[str]:
    return [line.strip() for line in str(error).splitlines() if line.strip()] or [type(error).__name__]


def _first_line(error: BaseException) -> str:
    return _lines(error)[0]


def _last_line(error: BaseException) -> str:
    """The last line of a remote traceback: the exception that ended it."""
    return _lines(error)[-1]

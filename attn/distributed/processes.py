"""Processes for lesson 20: ``spawn`` starts N of them on this machine, joined in one gloo process group.

Each process runs ``function(rank, world_size, *args)`` with ``torch.distributed`` initialised (the gloo
backend, which runs on CPUs; on GPUs the same code runs on NCCL). They meet through a file in a fresh
temporary folder, not a fixed port, so two runs at once (``pytest -n 2``) never collide. Each result comes
back through a file; every process is ended before ``spawn`` returns or raises, whatever happened, and so is
every process they started in turn (each runs in a process group of its own, ended whole).
"""

import contextlib
import datetime
import multiprocessing
import os
import signal
import socket
import tempfile
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist

from attn.common.validate import positive_number, require_callable, whole_number

__all__ = ["spawn"]

MAX_PROCESSES = 16
TIMEOUT = 120.0  # seconds for the whole run
COLLECTIVE_TIMEOUT = datetime.timedelta(seconds=60)  # a process that waits this long for another gives up
GRACE = 2.0  # seconds the others get to finish after one process fails
END_GRACE = 1.0  # seconds every process, together, gets to end after SIGTERM before SIGKILL
KEPT_TYPES = (ValueError, TypeError, FileNotFoundError, IndexError, KeyError, ZeroDivisionError, AssertionError)
# What a process raises when ANOTHER one failed: its peer closed the connection, or refused its input first.
CONSEQUENCES = ("DistBackendError", "DistNetworkError", "DistStoreError", "DistError", "PeerRefusedError")
CONSEQUENCE_WORDS = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "Timed out waiting")


def spawn(function, world_size, *args, timeout=TIMEOUT):
    """Run ``function(rank, world_size, *args)`` in ``world_size`` processes; their results in rank order.

    ``function`` returns what pickle can carry (tensors, numbers, lists, dicts). An exception in any process
    is raised here, with the process it came from; ``timeout`` (seconds) bounds the whole run.
    """
    require_callable("function", function)
    world_size = whole_number("world_size", world_size, minimum=1, maximum=MAX_PROCESSES)
    timeout = positive_number("timeout", timeout)
    if multiprocessing.current_process().daemon:
        raise ValueError("spawn was called inside a process that spawn started; its processes cannot start processes "
                         "of their own: call spawn once, from the notebook or script, with every process it needs")
    context = _start_context(function)
    with tempfile.TemporaryDirectory(prefix="attn-processes-") as folder:
        folder = Path(folder)
        processes = [context.Process(target=_run_one, args=(function, rank, world_size, folder, args), daemon=True)
                     for rank in range(world_size)]
        try:
            for process in processes:
                process.start()
                _own_group(process.pid)
            _wait(processes, folder, timeout)
        finally:
            _end(processes)
        return [_read_result(folder, rank, world_size) for rank in range(world_size)]


def _start_context(function):
    """fork where the platform has it (a function defined in a notebook cell travels with it), else spawn."""
    if not dist.is_available() or not dist.is_gloo_available():
        raise RuntimeError("this build of PyTorch has no torch.distributed gloo backend, so no process group can "
                           "start here; lesson 20's cells that run processes need a build with it (Linux and macOS "
                           "wheels from PyPI have it)")
    if "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork")
    qualified = getattr(function, "__qualname__", "")
    if getattr(function, "__module__", "__main__") == "__main__" or "<" in qualified:
        raise ValueError(f"this platform starts processes fresh (no fork), so each must import the function, and "
                         f"{qualified or function!r} is defined in a notebook or script, or inside another function; "
                         "move it to a module of its own and import it from there")
    return multiprocessing.get_context("spawn")


def _run_one(function, rank, world_size, folder, args):
    """The body of process ``rank``: join the group, run, write the result (or the error), leave."""
    _own_group(0)  # a process group of its own (spawn sets it too): whatever it starts is ended with it
    torch.set_num_threads(1)  # N processes share the cores: one math thread each
    _use_loopback()
    outcome = {}
    try:
        dist.init_process_group("gloo", init_method=(folder / "rendezvous").as_uri(), rank=rank,
                                 world_size=world_size, timeout=COLLECTIVE_TIMEOUT)
        outcome = {"result": function(rank, world_size, *args)}
    except BaseException as error:  # noqa: BLE001 - every failure goes back to the caller
        outcome = {"error": (type(error).__name__, str(error), traceback.format_exc())}
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    try:
        torch.save(outcome, folder / f"rank{rank}.pt")
    except Exception as error:  # noqa: BLE001 - a result pickle cannot carry
        torch.save({"error": ("TypeError", f"its result cannot be sent back ({error}); return tensors, numbers, "
                              "lists or dicts", "")}, folder / f"rank{rank}.pt")
    os._exit(0)  # leave without running the parent's exit handlers (a fork inherits them)


def _use_loopback():
    """All processes run on this machine: gloo talks over the loopback interface, whatever the host name says."""
    if "GLOO_SOCKET_IFNAME" not in os.environ:
        names = {name for _, name in socket.if_nameindex()}
        for loopback in ("lo", "lo0"):
            if loopback in names:
                os.environ["GLOO_SOCKET_IFNAME"] = loopback
                return


def _wait(processes, folder, timeout):
    """Until every process has ended; after one fails, the rest get GRACE seconds (they may wait for it forever)."""
    deadline, failed_at = time.monotonic() + timeout, None
    while any(process.is_alive() for process in processes):
        now = time.monotonic()
        if failed_at is None and any(_failed(process, folder, rank) for rank, process in enumerate(processes)):
            failed_at = now
        if failed_at is not None and now > failed_at + GRACE:
            return
        if now > deadline:
            raise RuntimeError(f"the {len(processes)} processes did not finish within {timeout:g} s (a process waiting "
                               "for a message another never sends?); every one of them was ended")
        time.sleep(0.01)


def _failed(process, folder, rank):
    if not process.is_alive() and process.exitcode != 0:
        return True
    path = folder / f"rank{rank}.pt"
    return path.exists() and "error" in _load(path)


def _own_group(pid):
    """Make process ``pid`` (0: this one) the leader of a process group of its own, where the platform has them.

    Both sides call it (the parent right after starting the child, the child first thing), so the group exists
    whichever runs first; a child that has already ended or exec'd is left as it is."""
    if hasattr(os, "setpgid"):
        with contextlib.suppress(OSError):
            os.setpgid(pid, 0)


def _signal_group(pid, number):
    """Send signal ``number`` to every process of the group led by ``pid``, if it still has any."""
    if hasattr(os, "killpg"):
        with contextlib.suppress(OSError):
            os.killpg(pid, number)


def _end(processes):
    """End every process and everything it started: SIGTERM to each group at once, END_GRACE seconds for all of
    them together, then SIGKILL to whatever is left (a process that ignores SIGTERM costs one grace, not one each)."""
    for process in processes:
        if process.pid is not None:
            _signal_group(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + END_GRACE
    for process in processes:
        if process.pid is not None:
            process.join(max(deadline - time.monotonic(), 0))
    for process in processes:
        if process.pid is not None:
            _signal_group(process.pid, signal.SIGKILL)  # the group outlives its leader while a member lives
            if process.is_alive():
                process.kill()
            process.join()


def _load(path):
    try:
        return torch.load(path, weights_only=False)
    except Exception:  # noqa: BLE001 - a file still being written reads as nothing yet
        return {}


def _read_result(folder, rank, world_size):
    outcomes = [_load(folder / f"rank{r}.pt") for r in range(world_size)]
    errors = [(r, outcome["error"]) for r, outcome in enumerate(outcomes) if "error" in outcome]
    if errors:
        raise _first_cause(errors, world_size)
    if "result" not in outcomes[rank]:
        raise RuntimeError(f"process {rank} of {world_size} ended without a result (killed, or out of memory?)")
    return outcomes[rank]["result"]


def _first_cause(errors, world_size):
    """The error to raise: the process that failed first in its own right, not one that stopped because another did.

    In order: a ValueError, TypeError... of the process's own (KEPT_TYPES), any other error of its own, and only then
    a consequence (a connection its peer closed, a peer's refusal passed on)."""
    kept_names = {kind.__name__ for kind in KEPT_TYPES}

    def order(item):
        rank, (name, message, _) = item
        consequence = name in CONSEQUENCES or any(words in message for words in CONSEQUENCE_WORDS)
        return (consequence, name not in kept_names, rank)

    rank, (name, message, _) = min(errors, key=order)
    kind = next((kind for kind in KEPT_TYPES if kind.__name__ == name), RuntimeError)
    return kind(f"process {rank} of {world_size} raised {name}: {message}")

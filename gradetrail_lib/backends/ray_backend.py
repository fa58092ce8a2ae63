"""The Ray backend: W async actors, each sending up to C requests over its own client.

The driver (this process) keeps the request list, streams requests to the actors in a
bounded window, and hands each outcome to `on_result` as it arrives, so the caller's
cache writer stores it at once. Actors never see the cache: DuckDB admits one writing
process, and that is the driver.

Cluster: `address` (or RAY_ADDRESS) names an existing cluster to connect to; without
one a local cluster is started for the run, bound to loopback and protected by token
authentication, and shut down at the end. A process already connected to Ray (e.g. a
test session or a long-lived service) is used as it is and left connected.

`ray` is imported only when a run starts, so that choosing another backend (or running
`gradetrail --version`) never pays for importing it.
"""

import asyncio
import ipaddress
import logging
import os
import secrets
import sys
import time
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from gradetrail_lib._version import __version__
from gradetrail_lib.backends.base import ResultCallback, SendsAsItComes
from gradetrail_lib.backends.clients import Outcome, RequestSender
from gradetrail_lib.errors import GradetrailError, RunAborted
from gradetrail_lib.providers.base import ModelRequest, ProviderError
from gradetrail_lib.providers.policy import AbortTracker, RetryPolicy
from gradetrail_lib.settings import DEFAULT_CONCURRENCY, DEFAULT_WORKERS

log = logging.getLogger(__name__)

# Ray's single-machine mode: with it, every Ray process binds and connects on 127.0.0.1
# (docs/performance.md); without it a local node uses the machine's external address.
# Ray reads it when `ray` is imported, and its child processes inherit it.
SINGLE_MACHINE_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
AUTH_MODE_ENV = "RAY_AUTH_MODE"
AUTH_TOKEN_ENV = "RAY_AUTH_TOKEN"
AUTH_TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"

# A worker whose actor dies has its requests sent again elsewhere; a request that was
# in flight on this many dying workers fails instead (it may be what kills them).
MAX_WORKER_DEATHS_PER_REQUEST = 3
# Results of many requests arrive in bursts; a few queued calls per actor keep its C
# slots busy while the driver turns a result into the next submission.
MIN_QUEUED_PER_WORKER = 2
READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0

_forced_single_machine = False


@dataclass
class RayRunStats:
    """How the last run went, for the benchmark and for tests."""

    connect_s: float = 0.0  # ray.init (starting a local cluster, or connecting)
    workers_ready_s: float = 0.0  # from creating the actors until all answered
    send_s: float = 0.0  # from the first submission until the last outcome
    started_cluster: bool = False
    worker_deaths: int = 0
    resubmitted: int = 0
    max_in_flight: int = 0


@dataclass
class _Slot:
    """One actor and the calls submitted to it that have not come back yet."""

    handle: Any  # ray.actor.ActorHandle of _Worker
    load: int = 0
    alive: bool = True


@dataclass
class _Call:
    request: ModelRequest
    slot: _Slot
    deaths: int  # workers that died while holding this request


@dataclass
class _Queue:
    """Requests not yet sent: first those whose worker died, then the untouched rest."""

    requests: Sequence[ModelRequest]
    next_index: int = 0
    again: deque[tuple[ModelRequest, int]] = field(default_factory=deque)

    def __bool__(self) -> bool:
        return bool(self.again) or self.next_index < len(self.requests)

    def pop(self) -> tuple[ModelRequest, int]:
        if self.again:
            return self.again.popleft()
        request = self.requests[self.next_index]
        self.next_index += 1
        return request, 0


class _Worker:
    """The actor body: one event loop, at most C requests sending, its own client.

    The actor admits more calls than C (the driver's window, plus one slot for `stop`),
    and a semaphore lets C of them send: queued calls wait here rather than in Ray's
    queue, so that `stop` never waits behind them.
    """

    def __init__(self, concurrency: int, policy: RetryPolicy) -> None:
        self._concurrency = concurrency
        self._policy = policy
        self._sender: RequestSender | None = None
        self._sending: asyncio.Semaphore | None = None
        self._calls: set[asyncio.Future[Outcome]] = set()
        self._stopped = False

    async def ready(self) -> str:
        # The driver compares versions: a cluster with another gradetrail installed
        # would send requests by other rules than the ones the manifest records.
        return __version__

    async def send(self, request: ModelRequest) -> Outcome | None:
        """The outcome, or None when the worker was stopped before it was sent."""
        # Created on the actor's event loop, on first use (async actors run __init__
        # outside it). No await between the check and the assignment.
        if self._sender is None or self._sending is None:
            self._sender = RequestSender()
            self._sending = asyncio.Semaphore(self._concurrency)
        async with self._sending:
            if self._stopped:
                return None
            call = asyncio.ensure_future(self._sender.send(request, self._policy))
            self._calls.add(call)
            try:
                return await call
            except asyncio.CancelledError:
                if self._stopped:
                    return None
                raise
            finally:
                self._calls.discard(call)

    async def stop(self) -> int:
        """Send nothing more: cancel what is sending and return once it has ended.

        ray.kill alone is not enough: the driver hears that an actor is dead before its
        process has stopped, and calls still queued there may send meanwhile.
        """
        self._stopped = True
        calls = list(self._calls)
        for call in calls:
            call.cancel()
        if calls:
            await asyncio.wait(calls)
        return len(calls)


def _is_loopback(address: str) -> bool:
    host = address.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _import_ray(loopback: bool) -> ModuleType:
    """`ray`, imported in single-machine mode when the cluster is on this machine only."""
    global _forced_single_machine
    restore = False
    if loopback:
        if os.environ.get(SINGLE_MACHINE_ENV) != "0":
            os.environ[SINGLE_MACHINE_ENV] = "0"
            _forced_single_machine = True
    elif _forced_single_machine:
        # An earlier local run of this process forced it; a driver of a remote cluster
        # must be reachable on the machine's address again.
        os.environ.pop(SINGLE_MACHINE_ENV, None)
        _forced_single_machine, restore = False, True
    import ray
    import ray._private.ray_constants as ray_constants

    # Ray read the variable when it was first imported, perhaps before we set it. The
    # flag is read at call time, so setting it has the same effect; start_local_cluster()
    # checks the node's address afterwards in any case.
    if loopback:
        ray_constants.ENABLE_RAY_CLUSTER = False
    elif restore:
        ray_constants.ENABLE_RAY_CLUSTER = not ray_constants.IS_WINDOWS_OR_OSX
    return ray


def _prepare_local_auth() -> None:
    """Token authentication for a cluster we start, with a token that lives in memory.

    Ray 2.60 turns token auth on for a new local cluster and, when no token is
    configured, writes a new one to ~/.ray/auth_token. We turn it on ourselves (so a
    change of Ray's default cannot turn it off) and, unless the user configured a token,
    generate one per process in the environment, which the cluster's processes inherit
    and a CLI started from here can use: nothing is written to disk. An explicit
    RAY_AUTH_MODE is respected, and "disabled" is said out loud.
    """
    mode = os.environ.get(AUTH_MODE_ENV)
    if mode is not None and mode.lower() != "token":
        log.warning(
            "%s=%s: the local Ray cluster runs without token authentication",
            AUTH_MODE_ENV,
            mode,
        )
        return
    os.environ[AUTH_MODE_ENV] = "token"
    if not (os.environ.get(AUTH_TOKEN_ENV) or os.environ.get(AUTH_TOKEN_PATH_ENV)):
        # 256 bits, as Ray's own generator. One per process, never changed: Ray's token
        # loader caches the token it first read.
        os.environ[AUTH_TOKEN_ENV] = secrets.token_hex(32)


def prepare_local_cluster() -> ModuleType:
    """`ray`, set up for a cluster this process starts: loopback only, token auth (the
    token in the environment, which the cluster's processes inherit)."""
    imported_before = "ray" in sys.modules
    _prepare_local_auth()  # before the import: Ray reads RAY_AUTH_MODE when loaded
    ray = _import_ray(loopback=True)
    if imported_before:
        # What Ray itself does when it turns token auth on: reload its cached config
        # (and the token loader's cache) so that this process sees the mode too.
        ray._raylet.Config.initialize("")
        ray._raylet.AuthenticationTokenLoader.instance().reset_cache()
    return ray


def start_local_cluster(num_cpus: int = 2) -> ModuleType:
    """Start a loopback-only, token-protected local Ray cluster and connect to it."""
    ray = prepare_local_cluster()
    ray.init(
        address="local",  # never RAY_ADDRESS: the caller decided to start one
        num_cpus=num_cpus,
        include_dashboard=False,
        # Actors' stdout and stderr stay in the session's log files, out of the CLI's.
        log_to_driver=False,
        logging_level=logging.WARNING,
        # Results are small and freed at once; Ray's default reserves 30% of memory.
        object_store_memory=128 * 1024 * 1024,
    )
    node_ips = {str(node["NodeManagerAddress"]) for node in ray.nodes()}
    if not all(_is_loopback(ip) for ip in node_ips):
        ray.shutdown()
        raise GradetrailError(
            f"the local Ray cluster bound to {sorted(node_ips)}, not to loopback; "
            f"set {SINGLE_MACHINE_ENV}=0 before anything imports ray"
        )
    return ray


def connect(address: str) -> ModuleType:
    """Connect to an existing cluster, explaining the usual reason it fails."""
    ray = _import_ray(loopback=_is_loopback(address))
    try:
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
    except ConnectionError as exc:
        hint = ""
        if os.environ.get(AUTH_MODE_ENV, "").lower() != "token":
            # Ray sends no token to an explicit address unless told to; a cluster that
            # requires one then looks unreachable (after ~20 s).
            hint = (
                f"; if the cluster uses token authentication, set {AUTH_MODE_ENV}=token "
                f"and {AUTH_TOKEN_ENV} or {AUTH_TOKEN_PATH_ENV} (or ~/.ray/auth_token)"
            )
        raise GradetrailError(f"cannot connect to the Ray cluster at {address}{hint}") from exc
    except ray.exceptions.AuthenticationError as exc:
        raise GradetrailError(f"Ray cluster at {address}: {exc}") from exc
    return ray


class RayBackend(SendsAsItComes):
    """`workers` async actors with `concurrency` requests each: W x C in flight."""

    name = "ray"

    def __init__(
        self,
        workers: int = DEFAULT_WORKERS,
        concurrency: int = DEFAULT_CONCURRENCY,
        address: str | None = None,
        policy: RetryPolicy | None = None,
        local_num_cpus: int = 2,
    ) -> None:
        if workers < 1 or concurrency < 1:
            raise ValueError("workers and concurrency must be at least 1")
        self.workers = workers
        self.concurrency = concurrency
        # Resolved now so that describe() records what run() will use.
        self.address = address or os.environ.get("RAY_ADDRESS") or None
        self.policy = policy or RetryPolicy()
        self.local_num_cpus = local_num_cpus
        self.last_run = RayRunStats()
        self._slots: list[_Slot] = []
        # The Ray connection this backend opened (None when it uses one the process had),
        # kept open to the end of the outermost session().
        self._own_connection: ModuleType | None = None
        self._sessions = 0

    def limited(self, max_concurrency: int) -> "RayBackend":
        if self.workers * self.concurrency <= max_concurrency:
            return self
        workers = min(self.workers, max_concurrency)
        return RayBackend(
            workers,
            max(1, max_concurrency // workers),
            self.address,
            self.policy,
            self.local_num_cpus,
        )

    def describe(self) -> dict[str, object]:
        return {
            "backend": self.name,
            "workers": self.workers,
            "concurrency": self.concurrency,
            "address": self.address or "local",
        }

    def prepare(self) -> None:
        """Nothing: the sender came with this module, and Ray itself (seconds) is loaded by
        the first run that sends, where bench_ray reports it apart."""

    @contextmanager
    def session(self) -> Iterator[None]:
        """Runs inside share one connection (and one local cluster), opened by the first
        run that needs it, so a spec of several models starts at most one cluster and a
        fully cached one starts none."""
        self._sessions += 1
        try:
            yield
        finally:
            self._sessions -= 1
            if not self._sessions:
                self._disconnect()

    def _disconnect(self) -> None:
        if self._own_connection is not None:
            # Stops the cluster if we started it, else only disconnects.
            self._own_connection.shutdown()
            self._own_connection = None

    def run(self, requests: Sequence[ModelRequest], on_result: ResultCallback) -> None:
        if not requests:
            return
        stats = self.last_run = RayRunStats()
        started = time.perf_counter()
        # A process already connected (a test session, a service, an earlier run of this
        # session) stays connected.
        if "ray" in sys.modules and sys.modules["ray"].is_initialized():
            import ray
        elif self.address:
            ray = self._own_connection = connect(self.address)
        else:
            ray = self._own_connection = start_local_cluster(self.local_num_cpus)
            stats.started_cluster = True
        stats.connect_s = time.perf_counter() - started
        try:
            self._run(ray, requests, on_result, stats)
        finally:
            if not self._sessions:
                self._disconnect()

    def _spawn(self, actor_class: Any) -> _Slot:
        handle = actor_class.remote(self.concurrency, self.policy)
        slot = _Slot(handle)
        self._slots.append(slot)
        return slot

    def _await_ready(self, ray: ModuleType, slots: list[_Slot]) -> None:
        try:
            versions = ray.get([s.handle.ready.remote() for s in slots], timeout=READY_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError as exc:
            raise GradetrailError(
                f"Ray workers not ready after {READY_TIMEOUT_S:g}s (is the cluster full?)"
            ) from exc
        except ray.exceptions.RayActorError as exc:
            raise GradetrailError(
                f"Ray workers failed to start (is gradetrail installed on the cluster?): {exc}"
            ) from exc
        mine = __version__
        if any(v != mine for v in versions):
            raise GradetrailError(
                f"the Ray cluster runs gradetrail {sorted(set(versions))}, this is {mine}"
            )

    def _run(
        self,
        ray: ModuleType,
        requests: Sequence[ModelRequest],
        on_result: ResultCallback,
        stats: RayRunStats,
    ) -> None:
        ActorError = ray.exceptions.RayActorError
        n_workers = min(self.workers, len(requests))
        window = self.concurrency + max(MIN_QUEUED_PER_WORKER, self.concurrency // 4)
        replacements_left = n_workers
        tracker = AbortTracker(self.policy.abort_after_identical)
        queue = _Queue(requests)
        in_flight: dict[Any, _Call] = {}  # ObjectRef -> call
        self._slots = []
        actor_class = ray.remote(_Worker).options(
            num_cpus=0,  # the actors wait on the network; CPUs stay free for others
            # Every call of the window runs at once (the actor's semaphore lets C of
            # them send), and one slot stays free for `stop`.
            max_concurrency=window + 1,
            max_restarts=0,  # a dead worker's requests go elsewhere instead
            max_task_retries=0,
        )
        try:
            ready_started = time.perf_counter()
            self._await_ready(ray, [self._spawn(actor_class) for _ in range(n_workers)])
            stats.workers_ready_s = time.perf_counter() - ready_started
            send_started = time.perf_counter()
            while True:
                # Top every live actor up to its window: memory stays bounded by
                # W x window requests however long the list is.
                while queue:
                    live = [s for s in self._slots if s.alive and s.load < window]
                    if not live:
                        break
                    slot = min(live, key=lambda s: s.load)
                    request, deaths = queue.pop()
                    in_flight[slot.handle.send.remote(request)] = _Call(request, slot, deaths)
                    slot.load += 1
                stats.max_in_flight = max(stats.max_in_flight, len(in_flight))
                if not in_flight:
                    if queue:  # requests left, no worker left to take them
                        raise RunAborted(
                            f"every Ray worker died ({stats.worker_deaths} deaths); "
                            "the responses received so far are cached"
                        )
                    break
                refs = list(in_flight)
                ready, rest = ray.wait(refs, num_returns=1)
                if rest:  # whatever else is done already, without waiting
                    more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
                    ready += more
                for ref in ready:
                    call = in_flight.pop(ref)
                    call.slot.load -= 1
                    try:
                        # Never None here: workers are stopped only after this loop.
                        outcome: Outcome = ray.get(ref)
                    except ActorError as exc:
                        if call.slot.alive:
                            call.slot.alive = False
                            stats.worker_deaths += 1
                            # An unreachable actor might still answer later; killing it
                            # makes sure each request has one outcome only.
                            ray.kill(call.slot.handle)
                            if replacements_left > 0:
                                replacements_left -= 1
                                self._spawn(actor_class)
                        if call.deaths + 1 < MAX_WORKER_DEATHS_PER_REQUEST:
                            queue.again.append((call.request, call.deaths + 1))
                            stats.resubmitted += 1
                            continue
                        outcome = ProviderError(
                            "transient",
                            f"Ray worker died {call.deaths + 1} times while sending this "
                            f"request: {type(exc).__name__}",
                        )
                    on_result(call.request, outcome)
                    if isinstance(outcome, ProviderError):
                        tracker.failure(outcome)  # raises RunAborted
                    else:
                        tracker.success()
            stats.send_s = time.perf_counter() - send_started
        finally:
            # On abort, error or interrupt: stop the actors' sending (see _Worker.stop)
            # and wait for it, so that after run() returns no worker of ours sends
            # anything; then end them, which cancels all that remains.
            live = [slot for slot in self._slots if slot.alive]
            if in_flight and live:
                stops = [slot.handle.stop.remote() for slot in live]
                ray.wait(stops, num_returns=len(stops), timeout=STOP_TIMEOUT_S)
            for slot in live:
                ray.kill(slot.handle)
                slot.alive = False
            in_flight.clear()

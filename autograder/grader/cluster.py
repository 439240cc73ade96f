"""The Dask cluster that grades a class: a local one on loopback with TLS, or the scheduler an instructor names.

`dask_client` makes or joins it; `BackgroundClient` starts it in a thread, so the cluster boots while
`autograder.grader.classgrade` reads the submissions. A local cluster listens on loopback only, with
TLS between its members (a certificate made for the run), no dashboard and no HTTP routes, and
restarts a worker whose own memory passes its limit.
"""
import concurrent.futures
import contextlib
import ipaddress
import logging
import sys
import urllib.parse

WORKER_MEMORY_MB = 3072  # the grader's side of a worker (trusted test cells); kernels have their own limit
ALLOWED_FAILURES = 1  # a local cluster's scheduler gives up on a task (KilledWorker) after its worker died this often
LOST_WORKER_TIMEOUT = "10 minutes"  # how long a local cluster waits for a worker that died to restart


def _security():
    """Self-signed TLS for the local cluster (mutual authentication: only its own members connect)."""
    from distributed.security import Security
    try:
        return Security.temporary()
    except ImportError:  # `cryptography` missing: loopback only, unauthenticated
        print("note: install `cryptography` so the local Dask cluster authenticates its members (TLS)",
              file=sys.stderr)
        return Security()


def _warn_if_open(address: str) -> None:
    parsed = urllib.parse.urlparse(address if "://" in address else f"tcp://{address}")
    try:
        loopback = ipaddress.ip_address(parsed.hostname or "").is_loopback
    except ValueError:
        loopback = parsed.hostname == "localhost"
    if parsed.scheme != "tls" and not loopback:
        print(f"warning: {address} is not a tls:// address: anyone who reaches it can run code on your workers "
              "(see the README, 'Securing a Dask cluster')", file=sys.stderr)


@contextlib.contextmanager
def dask_client(workers: int, scheduler: str | None, memory_mb: int = WORKER_MEMORY_MB):
    """A client of the given scheduler (its security from Dask's configuration), or of a local
    cluster of `workers` processes that listens on loopback only, with TLS, no dashboard and no
    HTTP routes, each worker restarted past `memory_mb` (its task then fails: that submission only)."""
    import dask
    from distributed import Client, LocalCluster
    if scheduler:
        _warn_if_open(scheduler)
        client = Client(scheduler)  # not `with`: BackgroundClient enters and leaves it in different threads
        try:
            yield client
        finally:
            client.close()
        return
    # Routes: read as the scheduler and the nannies are built (workers get a copy). The timeout: read when a worker
    # leaves; past it, the cluster closes that worker's nanny for good. A worker killed for memory restarts in seconds,
    # but took 19 s on a loaded machine of 2 cores: with Dask's 15 s, each such kill cost the run a worker for good.
    settings = {"distributed.scheduler.http.routes": [], "distributed.worker.http.routes": [],
                "distributed.deploy.lost-worker-timeout": LOST_WORKER_TIMEOUT}
    with dask.config.set(settings):
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                               dashboard_address=None, security=_security(), memory_limit=f"{memory_mb}MiB",
                               scheduler_kwargs={"allowed_failures": ALLOWED_FAILURES,
                                                 "dashboard_address": "127.0.0.1:0"},
                               silence_logs=logging.ERROR)
        with cluster:
            client = Client(cluster)
            try:
                yield client
            finally:
                client.close()


class BackgroundClient:
    """Starts `dask_client` in a thread, so the cluster boots while submissions are read."""

    def __init__(self, workers, scheduler, memory_mb):
        self._stack = contextlib.ExitStack()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        self._future = self._pool.submit(self._stack.enter_context, dask_client(workers, scheduler, memory_mb))

    def get(self):
        return self._future.result()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        with contextlib.suppress(Exception):
            self._future.result()
        self._pool.shutdown()
        self._stack.close()

"""Run notebooks headless without the random stall that widget cells cause.

nbclient waits for a cell's reply with one long poll of the kernel's shell socket; when the
cell shows ipywidgets, that poll sometimes misses the reply and sleeps until the cell's
timeout (jupyter/nbclient#312). Polling in short slices sees the reply within a fraction of
a second. The tests, the benchmark and nbgrader (via nbgrader_config.py) all use this.
"""
import time
from queue import Empty

from nbclient import NotebookClient
from nbclient.util import run_sync

POLL_SLICE_S = 0.25


def poll_in_slices(channel, check=None) -> None:
    """Replace `channel.get_msg` by one that polls in short slices up to the same timeout, calling
    `check` (which may raise, to end the wait) before each slice."""
    get_msg = channel.get_msg

    async def sliced_get_msg(timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if check is not None:
                check()
            remaining = POLL_SLICE_S if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                return await get_msg(timeout=min(POLL_SLICE_S, remaining))
            except Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise

    channel.get_msg = sliced_get_msg


class SteadyClientMixin:
    """For any NotebookClient subclass: its kernel client polls the shell channel in slices, calling
    `connection_check` before each."""

    def connection_check(self) -> None:
        """Before each slice of a poll for a reply: a subclass raises here to end the cell."""

    async def async_start_new_kernel_client(self):
        kc = await super().async_start_new_kernel_client()
        poll_in_slices(kc.shell_channel, self.connection_check)
        return kc

    # nbclient binds its synchronous version (used by `setup_kernel`) to its own coroutine at class
    # creation: bind it again here, or the sliced poll would be skipped there.
    start_new_kernel_client = run_sync(async_start_new_kernel_client)


class SteadyNotebookClient(SteadyClientMixin, NotebookClient):
    """nbclient's NotebookClient without the widget stall."""

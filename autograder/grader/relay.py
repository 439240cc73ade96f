"""Carry a kernel's connections to the grader, cutting any message over a size limit before the grader holds it.

libzmq's MAXMSGSIZE bounds one frame, and the receiving libzmq assembles every frame of a multipart
message before pyzmq sees any: a kernel once sent one message of 100 frames of 30 MB (one buffer,
zero-copy) and the grading worker ran out of memory. The grader's sockets therefore connect to a
`Relay` (Unix sockets in a folder the sandbox never sees), which connects each of them to the
kernel's socket of the same port and passes bytes both ways unchanged. From the kernel it reads
ZMTP 3's framing as it streams by (RFC 23/ZMTP: a 64-byte greeting, then frames, each a flags byte
and a 1- or 8-byte big-endian size) and keeps the size of the message in flight, all its frames
together. Where the next frame would take that past the channel's limit, or the bytes are not
ZMTP 3, the relay closes the connection before passing the frame's header on: libzmq drops the
incomplete message (having allocated at most the limit) and connects again, and the relay notes
why in `faults` (the grader then fails the running cell with it). It holds one chunk per direction
per connection and at most a frame header of its own.
"""
import selectors
import socket
import threading

GREETING = 64  # ZMTP 3's greeting: signature (0xFF, 8 bytes, 0x7F), version, mechanism, as-server, filler
MORE, LONG, COMMAND = 1, 2, 4  # a frame's flags; the other bits must be 0
CHUNK = 64 * 1024
CONNECTIONS = 8  # per port: the grader opens two at most (a client's socket, the manager's control socket)


class Cut(Exception):
    """Why a kernel's connection was cut."""


class Meter:
    """ZMTP 3's framing in the bytes one peer sends, read as they stream by: raises `Cut` where the
    message in flight would pass `limit` bytes (a command counts alone) or the bytes are not ZMTP 3."""

    def __init__(self, limit):
        self.limit = limit
        self.seen = 0  # bytes of the greeting seen
        self.header = bytearray()  # the current frame's header, as far as it has come
        self.body = 0  # bytes of the current frame still to come
        self.total = 0  # bytes of the message in flight, its frames so far

    def feed(self, data) -> None:
        view, at = memoryview(data), 0
        while at < len(view):
            if self.seen < GREETING:
                at = self._greet(view, at)
            elif self.body:
                step = min(self.body, len(view) - at)
                self.body -= step
                at += step
            else:
                self.header.append(view[at])
                at += 1
                self._frame()

    def _greet(self, view, at) -> int:
        end = min(len(view), at + GREETING - self.seen)
        for offset in range(at, end):
            position, byte = self.seen + offset - at, view[offset]
            if (position == 0 and byte != 0xFF) or (position == 9 and not byte & 1) or (position == 10 and byte < 3):
                raise Cut("bytes that are not ZMTP 3 (the greeting of another protocol)")
        self.seen += end - at
        return end

    def _frame(self) -> None:
        flags = self.header[0]
        if flags & ~(MORE | LONG | COMMAND) or (flags & COMMAND and flags & MORE):
            raise Cut(f"bytes that are not ZMTP 3 (a frame whose flags are {flags:#04x})")
        if len(self.header) < (9 if flags & LONG else 2):
            return
        size = int.from_bytes(self.header[1:], "big")
        self.header.clear()
        total = size if flags & COMMAND else self.total + size
        if total > self.limit:
            raise Cut(f"a message of more than {self.limit:,} bytes (all its frames together)")
        self.total = total if flags & MORE else 0
        self.body = size


class _Link:
    """One connection of the grader's and the kernel's connection it is carried to."""

    def __init__(self, grader, kernel, channel, limit):
        self.grader, self.kernel, self.channel = grader, kernel, channel
        self.meter = Meter(limit)
        self.waiting = {grader: b"", kernel: b""}  # bytes read from the other end, not yet written to this one
        self.ended = False

    def other(self, end):
        return self.kernel if end is self.grader else self.grader

    def events(self, end) -> int:
        """Read from an end only once what it sent before has gone on: one chunk per direction."""
        return (0 if self.waiting[self.other(end)] else selectors.EVENT_READ) | (
            selectors.EVENT_WRITE if self.waiting[end] else 0)


class Relay:
    """Listens at `{address}-{port}` for each channel of `channels` ({name: (port, the most bytes a
    message from the kernel may have there)}) and carries each connection to `{kernel}-{port}`, in
    a thread of its own until `close`."""

    def __init__(self, folder, kernel, channels):
        self.address, self.kernel = f"{folder}/k", kernel
        self.faults = []  # why connections were cut, oldest first (appended by the relay's thread)
        self._selector = selectors.DefaultSelector()
        self._links, self._listeners = set(), []
        self._wake, self._woken = socket.socketpair()
        self._selector.register(self._woken, selectors.EVENT_READ, None)
        try:
            for name, (port, limit) in channels.items():
                listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self._listeners.append(listener)
                listener.bind(f"{self.address}-{port}")
                listener.listen(CONNECTIONS)
                listener.setblocking(False)
                self._selector.register(listener, selectors.EVENT_READ, (name, port, limit))
        except BaseException:
            self._release()
            raise
        self._thread = threading.Thread(target=self._serve, name=f"relay to {kernel}", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop carrying and close every connection (once; again does nothing)."""
        if not self._selector.get_map():  # closed already
            return
        self._wake.send(b"x")
        self._thread.join()
        self._release()

    def _release(self):
        for link in list(self._links):
            self._end(link)
        for end in (*self._listeners, self._wake, self._woken):
            end.close()
        self._selector.close()

    def _serve(self):
        try:
            while True:
                for key, mask in self._selector.select():
                    if key.data is None:
                        return
                    if isinstance(key.data, tuple):
                        self._accept(key.fileobj, *key.data)
                    elif not key.data.ended:
                        self._carry(key.data, key.fileobj, mask)
        except Exception as err:  # a fault of the relay's own: said, with its type, where the cell fails
            self.faults.append(f"the relay to the kernel stopped ({type(err).__name__}: {err})")

    def _accept(self, listener, name, port, limit):
        try:
            grader, _ = listener.accept()
        except OSError:
            return
        kernel = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        kernel.setblocking(False)  # a kernel that stops accepting (its backlog full) is not waited for
        grader.setblocking(False)
        try:
            if sum(link.channel == name for link in self._links) >= CONNECTIONS:
                raise ConnectionRefusedError
            kernel.connect(f"{self.kernel}-{port}")
        except OSError:  # not listening yet, or gone: the grader's libzmq connects again
            kernel.close(), grader.close()
            return
        link = _Link(grader, kernel, name, limit)
        self._links.add(link)
        for end in (grader, kernel):
            self._selector.register(end, selectors.EVENT_READ, link)

    def _carry(self, link, end, mask):
        try:
            if mask & selectors.EVENT_WRITE:
                sent = end.send(link.waiting[end])
                link.waiting[end] = link.waiting[end][sent:]
            if mask & selectors.EVENT_READ:
                data = end.recv(CHUNK)
                if not data:
                    raise ConnectionResetError
                if end is link.kernel:
                    link.meter.feed(data)
                link.waiting[link.other(end)] = data
        except Cut as cut:
            self.faults.append(f"the kernel sent {cut} on its {link.channel} channel, and its connection was cut")
            self._end(link)
            return
        except OSError:  # an end went away (the kernel ended, the grader closed a socket)
            self._end(link)
            return
        for each in (link.grader, link.kernel):
            self._watch(each, link.events(each), link)

    def _watch(self, end, events, link):
        """Select `events` of `end`; none (it waits for the other end to write): not selected at all."""
        try:
            self._selector.modify(end, events, link) if events else self._selector.unregister(end)
        except KeyError:  # not selected before
            if events:
                self._selector.register(end, events, link)

    def _end(self, link):
        link.ended = True
        self._links.discard(link)
        for end in (link.grader, link.kernel):
            self._watch(end, 0, link)
            end.close()

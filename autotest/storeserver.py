# SPDX-License-Identifier: MIT
"""What the tests' store servers share: a server program started on loopback that prints
"listening PORT" and stops when its stdin closes, and a request log of one
"METHOD PATH STATUS ..." line per request."""

import collections
import os
import subprocess
import threading


def drain(proc, *streams):
    """Read what the server writes to `streams` for as long as it runs, keeping the last lines
    in proc.output_tail: a pipe nobody reads fills (64 KB) and then blocks the server's next
    write, and with it the request that wrote (a warning per request is enough)."""
    proc.output_tail = collections.deque(maxlen=200)

    def read(stream):
        for line in stream:
            proc.output_tail.append(line)

    for stream in streams:
        threading.Thread(target=read, args=(stream,), daemon=True).start()


def start_listening(command, what):
    """Start `command`; return (process, port) once it says where it listens."""
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line.startswith("listening "):
        proc.kill()
        raise RuntimeError(f"{what} did not start: {line}{proc.stderr.read()}")
    drain(proc, proc.stdout, proc.stderr)
    return proc, int(line.split()[1])


def stop_by_stdin(proc):
    """Close the server's stdin, its signal to stop, and wait for it."""
    if proc is not None:
        proc.stdin.close()
        proc.wait(timeout=10)


class RequestLog:
    """Reads a server's request log at `self.log_path`."""

    def mark(self):
        """A position in the request log; requests_since(mark) lists what came after it."""
        return os.path.getsize(self.log_path)

    def requests_since(self, mark):
        with open(self.log_path) as f:
            f.seek(mark)
            return [tuple(line.split()) for line in f if line.strip()]

    def writes_since(self, mark):
        """PUT, POST (multipart) and DELETE requests after `mark`."""
        return [r for r in self.requests_since(mark) if r[0] in ("PUT", "POST", "DELETE")]

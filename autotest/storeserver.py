"""What the tests' store servers share: a server program started on loopback that prints
"listening PORT" and stops when its stdin closes, and a request log of one
"METHOD PATH STATUS ..." line per request."""

import os
import subprocess


def start_listening(command, what):
    """Start `command`; return (process, port) once it says where it listens."""
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line.startswith("listening "):
        proc.kill()
        raise RuntimeError(f"{what} did not start: {line}{proc.stderr.read()}")
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

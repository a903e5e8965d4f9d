"""The progress bar of ``retrieval-metrics evaluate``: on stderr, only once the work has run for a
while, redrawn by a background thread."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, TextIO

__all__ = ["Progress"]


class Progress:
    """A progress bar on stderr that appears only once the work has run for ``delay`` seconds.

    A background thread redraws it (so it also moves during one long step); nothing is written
    for work that finishes sooner. ``delay < 0`` turns it off.
    """

    def __init__(
        self,
        total: int,
        label: str,
        *,
        delay: float = 2.0,
        stream: TextIO | None = None,
        width: int = 28,
    ) -> None:
        self.total = max(1, int(total))
        self.label = label
        self.delay = delay
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.done = 0
        self.drawn = False
        # a terminal's bar is redrawn in place; a log file gets a line a state (set when the
        # bar first shows), the final state only where it differs from the last line
        self.tty = True
        self._last_logged = -1
        self._start = 0.0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Progress:
        self._start = time.monotonic()
        if self.delay >= 0:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def advance(self, n: int = 1) -> None:
        with self._lock:
            self.done = min(self.total, self.done + n)

    def phase(self, label: str, total: int = 1) -> None:
        """Go on with the next step of the same work under a new label: a bar already shown
        gets its final state and its own line, and the new step is shown at once (a log
        file's bar is redrawn only every few seconds: a step shorter than that would not be
        seen, nor would which step a long one is until then)."""
        with self._lock:
            shown = self.drawn
            if shown:
                self._write(final=True)
                self.drawn = False
            self.label, self.total, self.done = label, max(1, int(total)), 0
            if shown:
                self._write(final=False)

    def _run(self) -> None:
        if self._stop.wait(self.delay):
            return
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        while True:
            with self._lock:
                self._write(final=False)
            if self._stop.wait(0.25 if self.tty else 5.0):
                return

    def _write(self, final: bool) -> None:
        elapsed = time.monotonic() - self._start
        filled = round(self.width * self.done / self.total)
        bar = "#" * filled + "." * (self.width - filled)
        line = f"{self.label} [{bar}] {self.done}/{self.total} {elapsed:5.1f}s"
        if self.tty:
            self.stream.write("\r" + line + ("\n" if final else ""))
        elif not final or self.done != self._last_logged:
            # a log file: each state on a line of its own (carriage returns piled every
            # redraw onto one line), the final state only where it differs from the last
            self.stream.write(line + "\n")
        self._last_logged = self.done
        self.stream.flush()
        self.drawn = True


    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.drawn:
            with self._lock:
                self._write(final=True)

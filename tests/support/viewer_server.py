"""The viewer served from a thread for the tests: `with Background(root) as url`."""

import asyncio
import threading
from pathlib import Path

from gradetrail_lib.history.entries import HistoryStore
from gradetrail_lib.viewer.app import bind, create_app, server


class Background:
    def __init__(
        self,
        root: Path,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        labels: bool = False,
        history: HistoryStore | None = None,
    ) -> None:
        self.sock = bind(host, port)
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{self.sock.getsockname()[1]}"
        app = create_app(root, host, labels=labels, labeller="tester", history=history)
        self.server = server(app)
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.run(self.server.serve(sockets=[self.sock]))

    def __enter__(self) -> str:
        self.thread.start()
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("the viewer did not start")
            threading.Event().wait(0.01)
        return self.url

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()

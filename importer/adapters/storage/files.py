"""Local files as import sources."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

from importer.core.errors import FileRejectedError
from importer.core.models import Reason


class LocalFileSource:
    """A local path, read in blocks off the event loop."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.name = path.name
        try:
            self.size: int | None = os.stat(path).st_size
        except OSError as exc:
            raise FileRejectedError(Reason.SOURCE_UNREADABLE, f"{path}: {exc.strerror}") from exc

    async def blocks(self, block_size: int) -> AsyncIterator[bytes]:
        try:
            handle = await asyncio.to_thread(open, self.path, "rb", buffering=0)
        except OSError as exc:
            raise FileRejectedError(Reason.SOURCE_UNREADABLE, f"{self.path}: {exc}") from exc
        with handle:
            while block := await asyncio.to_thread(handle.read, block_size):
                yield block

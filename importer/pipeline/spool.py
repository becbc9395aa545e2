"""Batches parsed ahead of their apply, held in a temporary file: the file is read once.

A run with an error threshold (``max_invalid``) validates the whole file before it writes a
contact. It parses each block once, as any run does, and keeps the batches it cut here, each
as the broker's batch message (:mod:`importer.core.codec`, compiled where built), behind a
4-byte length. If the invalid rows stay within the threshold, the run applies the batches read
back from here; if not, it reports their issues and applies none. Memory stays bounded (one
step's batches at a time); the disk holds about the size of the file's valid rows. The file
is anonymous (deleted when closed, or when the process dies): a run stopped before it applied
everything reads the file again (its ledger skips what was applied).
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterable

from importer.core import codec
from importer.core.models import Batch, Limits

_LENGTH = 4
_OWNER = "spool"  # the message's lease owner field: unused here


class BatchSpool:
    """Write every batch, then :meth:`rewind` and :meth:`read` them back in the same order.
    Blocking file I/O: call it from a thread (``asyncio.to_thread``)."""

    def __init__(self, job_id: uuid.UUID, limits: Limits, *, compiled: bool = True) -> None:
        self._job_id = job_id
        self._limits = limits
        self._codec = codec.implementation(compiled)
        self._file = tempfile.TemporaryFile(prefix="importer-spool-")  # noqa: SIM115 (closed by close)
        self.batches = 0
        self.bytes = 0

    def write(self, batches: Iterable[Batch]) -> None:
        for batch in batches:
            body = self._codec.encode(self._job_id, _OWNER, batch)
            self._file.write(len(body).to_bytes(_LENGTH, "big"))
            self._file.write(body)
            self.batches += 1
            self.bytes += _LENGTH + len(body)

    def rewind(self) -> None:
        self._file.flush()
        self._file.seek(0)

    def read(self, count: int) -> list[Batch]:
        """The next ``count`` batches at most; empty at the end."""
        batches: list[Batch] = []
        while len(batches) < count:
            head = self._file.read(_LENGTH)
            if not head:
                break
            body = self._file.read(int.from_bytes(head, "big"))
            batches.append(self._codec.decode(body, self._limits).batch)
        return batches

    def close(self) -> None:
        self._file.close()

"""gzip input, decompressed in bounded pieces with a size cap and an expansion-ratio guard."""

from __future__ import annotations

import zlib
from collections.abc import Iterator

from importer.core.models import Reason
from importer.read.records import FileRejected

PIECE_BYTES = 256 * 1024  # largest piece GzipInflater.feed_iter yields


RATIO_AFTER_BYTES = 8 * 1024 * 1024  # GzipInflater's ratio guard starts past this much output


class GzipInflater:
    """Incremental gzip decompression with a cap on the total decompressed size (bomb guard).

    Concatenated members are read one after another; zero padding after a member is ignored,
    as gzip does. ``feed_iter`` yields pieces of at most ``piece_bytes``, so memory stays at one
    piece whatever the ratio; ``feed`` joins them, so one 256 KiB block of zeros (~256 MB out)
    is held whole. The output passes the cap by at most one byte before the rejection. Damaged
    or truncated data is SOURCE_UNREADABLE.

    With ``max_ratio``, once the stream has produced more than ``ratio_after_bytes`` the output
    may not pass ``max_ratio`` times the compressed bytes consumed (counted over all members,
    so a bomb of many small members is caught too): a bomb is DECOMPRESSED_TOO_LARGE after a
    few MiB of work, not at the absolute cap. Small files are never held to the ratio.
    """

    def __init__(
        self,
        max_output_bytes: int,
        *,
        piece_bytes: int = PIECE_BYTES,
        max_ratio: int | None = None,
        ratio_after_bytes: int = RATIO_AFTER_BYTES,
    ) -> None:
        self._cap = max_output_bytes
        self._piece = piece_bytes
        self._max_ratio = max_ratio
        self._ratio_after = ratio_after_bytes
        self._total = 0
        self._total_in = 0  # compressed bytes consumed (padding between members left out)
        self._members = 0
        self._member: zlib._Decompress | None = None

    @property
    def total_out(self) -> int:
        """Bytes decompressed so far."""
        return self._total

    def feed(self, data: bytes) -> bytes:
        """All the bytes data decompresses to (up to the cap: prefer feed_iter in a pipeline)."""
        return b"".join(self.feed_iter(data))

    def feed_iter(self, data: bytes) -> Iterator[bytes]:
        """Decompress data, raising DECOMPRESSED_TOO_LARGE once the output passes the cap."""
        while True:
            if self._member is None:
                data = self._start_member(data)
            member = self._member
            if member is None:
                return
            limit = min(self._piece, self._cap - self._total + 1)
            piece = self._inflate(member, data, limit)
            if piece:
                yield piece
            if member.eof:
                data, self._member = member.unused_data, None
            elif member.unconsumed_tail or len(piece) == limit:
                data = member.unconsumed_tail  # more output may be waiting inside zlib
            else:
                return

    def finish(self) -> bytes:
        """Check that the stream ended at the end of a member; nothing is left to return."""
        if self._member is not None:
            raise FileRejected(Reason.SOURCE_UNREADABLE, "the gzip stream is truncated")
        return b""

    def _start_member(self, data: bytes) -> bytes:
        if self._members:
            data = data.lstrip(b"\x00")  # zero padding after a member
        if data:
            self._member = zlib.decompressobj(wbits=31)
            self._members += 1
        return data

    def _inflate(self, member: zlib._Decompress, data: bytes, limit: int) -> bytes:
        try:
            piece = member.decompress(data, limit)
        except zlib.error as exc:
            raise FileRejected(Reason.SOURCE_UNREADABLE, f"corrupt gzip data: {exc}") from exc
        self._total += len(piece)
        self._total_in += len(data) - len(member.unconsumed_tail) - len(member.unused_data)
        if self._total > self._cap:
            raise FileRejected(
                Reason.DECOMPRESSED_TOO_LARGE,
                f"decompressed size passes the cap of {self._cap} bytes",
            )
        self._check_ratio()
        return piece

    def _check_ratio(self) -> None:
        ratio = self._max_ratio
        if ratio is None or self._total <= self._ratio_after:
            return
        if self._total > ratio * max(self._total_in, 1):
            raise FileRejected(
                Reason.DECOMPRESSED_TOO_LARGE,
                f"gzip expands more than {ratio} times ({self._total} bytes out of "
                f"{self._total_in}): a decompression bomb",
            )

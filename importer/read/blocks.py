"""Source blocks → batches for one run: gzip, sniffing, the reader of the format, resume.

:class:`BlockParser` takes the source's byte blocks as they come, inflates gzip, sniffs the
encoding and the delimiter, feeds the reader of the job's format (CSV, JSONL, XLSX) and hands the
records to the :class:`~importer.read.chunker.Chunker`; resumed from a checkpoint, it drops the
bytes before it. :func:`suspect_encoding_warning` is the job warning of a file that looks like
UTF-8 read as Windows-1252.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from importer.core.config import PipelineConfig
from importer.core.keys import NO_GROUPS, KeyGroups
from importer.core.models import (
    Batch,
    Checkpoint,
    InputFormat,
    Job,
    JobWarning,
    Reason,
)
from importer.read.chunker import Chunker
from importer.read.csvfile import CsvReader
from importer.read.inflate import GzipInflater
from importer.read.jsonl import JsonlReader
from importer.read.records import JsonRecord, RawRecord
from importer.read.sniff import sniff
from importer.read.xlsx import SheetReader, WorkbookSpool

try:  # the compiled reader, when built (setup.py); else the pure one, its specification
    from importer.read._csvfast import FastCsvReader
except ImportError:  # pragma: no cover - a checkout without the build
    FastCsvReader = None  # type: ignore[assignment,misc]

_SNIFF_BYTES = 64 * 1024


_GZIP_MAGIC = b"\x1f\x8b"


class BlockParser:
    """Raw source blocks → batches, synchronously (run off the event loop, in a thread).

    Inflates gzip one bounded piece at a time (a bomb never materializes), sniffs encoding and
    delimiter on the first 64 KiB, decodes records and hands them to the :class:`Chunker`.

    Given a :class:`Checkpoint`, it resumes there: the head still gives the encoding, the
    delimiter and the header, but the bytes up to the checkpoint are dropped undecoded and
    chunks are numbered on from it (same chunk size: the same chunk boundaries as before).

    An XLSX workbook is spooled to a temporary file as its blocks come (a zip is read from its
    end); once the last block is in, :meth:`pull_rows` reads its sheet a few thousand rows at a
    time. A resumed run reads the sheet again from its header and drops the rows before the
    checkpoint's line. :meth:`close` drops the spool, whatever the run's end.
    """

    def __init__(
        self,
        job: Job,
        source_name: str,
        config: PipelineConfig,
        checkpoint: Checkpoint | None = None,
        groups: KeyGroups = NO_GROUPS,
    ) -> None:
        self.chunker = Chunker(job, config, groups)
        self._config = config
        self._format = job.input_format
        self._source_name = source_name
        self._inflater: GzipInflater | None = None
        self._pieces: Iterator[bytes] = iter(())
        self._head = bytearray()
        self._reader: CsvReader | JsonlReader | None = None
        self._started = False
        self._checkpoint = checkpoint
        self._position = 0  # decoded-stream bytes passed to the reader or dropped before it
        self._spool = WorkbookSpool() if self._format is InputFormat.XLSX else None
        self._sheet: SheetReader | None = None

    def push(self, block: bytes) -> None:
        """Take the next raw block; :meth:`pull` then parses it piece by piece."""
        if not self._started:
            self._started = True
            if block.startswith(_GZIP_MAGIC) or self._source_name.endswith(".gz"):
                limits = self._config.limits
                self._inflater = GzipInflater(
                    limits.max_decompressed_bytes, max_ratio=limits.max_gzip_ratio
                )
        self._pieces = self._inflater.feed_iter(block) if self._inflater else iter((block,))

    def pull(self) -> list[Batch] | None:
        """The batches of the next piece of the pushed block; None once it is used up."""
        piece = next(self._pieces, None)
        if piece is None:
            return None
        if self._spool is not None:
            self._spool.write(piece)
            return []
        return self._feed_decoded(piece)

    def pull_rows(self) -> list[Batch] | None:
        """After the last block: the batches of a workbook's next rows; None once all are read
        (and at once for CSV and JSON Lines, whose last records :meth:`finish` gives)."""
        if self._spool is None:
            return None
        if self._sheet is None:
            if self._inflater is not None:
                self._inflater.finish()
            self._sheet = self._open_sheet(self._spool)
        records = self._sheet.read()
        if records is None:
            return None
        if self._checkpoint is not None:
            records = self._after_checkpoint(records, self._checkpoint)
        return self._emit(records)

    def close(self) -> None:
        if self._sheet is not None:
            self._sheet.close()
        if self._spool is not None:
            self._spool.close()

    def finish(self) -> list[Batch]:
        if self._inflater is not None:
            self._inflater.finish()
        if self._spool is not None:
            return self._emit_end()
        batches: list[Batch] = []
        reader = self._reader
        if reader is None:
            reader = self._start(bytes(self._head))
            batches += self._emit(reader.feed(self._resumed(bytes(self._head))))
        return batches + self._emit(reader.finish()) + self._emit_end()

    def _emit(self, records: Sequence[RawRecord] | Sequence[JsonRecord]) -> list[Batch]:
        """The batches of the records read (a :class:`RecordParser` keeps the records)."""
        return self.chunker.feed(records)

    def _emit_end(self) -> list[Batch]:
        return self.chunker.finish()

    def _open_sheet(self, spool: WorkbookSpool) -> SheetReader:
        limits, layout = self._config.limits, self._config.layout
        return SheetReader(
            spool.file,
            sheet=layout.sheet if layout is not None else None,
            max_field_chars=limits.max_field_chars,
            max_record_chars=limits.max_record_chars,
            max_decompressed_bytes=limits.max_decompressed_bytes,
        )

    def _after_checkpoint(
        self, records: list[RawRecord], checkpoint: Checkpoint
    ) -> list[RawRecord]:
        """A resumed workbook's records after the checkpoint's line; the first record (the
        header, or the first row without one) plans the rows, as in the first run."""
        if not self.chunker.header_seen:
            if not records:
                return records
            if not self.chunker.resume(checkpoint, records[0]):
                self._checkpoint = None  # an unreadable header: the chunker rejects the file
                return records
        return [record for record in records if record.line >= checkpoint.end_line]

    def _feed_decoded(self, data: bytes) -> list[Batch]:
        reader = self._reader
        if reader is None:
            self._head += data
            if len(self._head) < _SNIFF_BYTES:
                return []
            data = bytes(self._head)
            reader = self._start(data)
        return self._emit(reader.feed(self._resumed(data)))

    def _start(self, head: bytes) -> CsvReader | JsonlReader:
        """The reader, from the head: at the file's start, or at the checkpoint."""
        checkpoint = self._checkpoint
        if checkpoint is not None and not self.chunker.resume(checkpoint, self._first(head)):
            checkpoint = self._checkpoint = None  # no header in the head: read it all again
        self._reader = _reader(head, self._format, self._config, checkpoint)
        return self._reader

    def _first(self, head: bytes) -> RawRecord | JsonRecord | None:
        """The head's first record (a CSV's header or first row), parsed by a reader of its own."""
        if self._format is InputFormat.JSONL:
            return None
        first = _reader(head, self._format, self._config)
        records = first.feed(head)
        return records[0] if records else None

    def suspect_encoding(self) -> JobWarning | None:
        """The file-level warning once the text read looks like UTF-8 read as a code page."""
        reader = self._reader
        if reader is None or reader.mojibake is None:
            return None
        return suspect_encoding_warning(reader.encoding, reader.mojibake)

    def _resumed(self, data: bytes) -> bytes:
        """The part of data at or after the checkpoint (all of it without one)."""
        start = self._position
        self._position += len(data)
        checkpoint = self._checkpoint
        if checkpoint is None or start >= checkpoint.end_offset:
            return data
        return data[checkpoint.end_offset - start :]


class RecordParser(BlockParser):
    """A :class:`BlockParser` that keeps the records read instead of cutting them into batches
    (the source-format error report reads the file back): :meth:`take` gives those read so far,
    in file order, as decoded, with their lines."""

    def __init__(self, job: Job, source_name: str, config: PipelineConfig) -> None:
        super().__init__(job, source_name, config)
        self._records: list[RawRecord | JsonRecord] = []

    def _emit(self, records: Sequence[RawRecord] | Sequence[JsonRecord]) -> list[Batch]:
        self._records += records
        return []

    def _emit_end(self) -> list[Batch]:
        return []

    def take(self) -> list[RawRecord | JsonRecord]:
        records, self._records = self._records, []
        return records

    @property
    def delimiter(self) -> str:
        """The file's delimiter, once read (a workbook's report is written with commas)."""
        reader = self._reader
        return reader.delimiter if isinstance(reader, CsvReader) else ","


def suspect_encoding_warning(encoding: str, seen: str) -> JobWarning:
    """The warning of a file decoded as a single-byte code page that holds UTF-8 sequences."""
    return JobWarning(
        Reason.SUSPECT_ENCODING,
        f"the file was read as {encoding} but holds UTF-8 byte sequences (read as {seen!r}): "
        "its accented names may be garbled; check them, or give the layout "
        '"encoding": "utf-8" and import it again',
    )


def _reader(
    sample: bytes,
    input_format: InputFormat,
    config: PipelineConfig,
    checkpoint: Checkpoint | None = None,
) -> CsvReader | JsonlReader:
    layout, limits = config.layout, config.limits
    start_line, start_offset = (
        (checkpoint.end_line, checkpoint.end_offset) if checkpoint is not None else (1, 0)
    )
    sniffed = sniff(
        sample[:_SNIFF_BYTES],  # exactly: the same decision whatever the block size, resumed or not
        encoding=layout.encoding if layout else None,
        delimiter=layout.delimiter if layout else None,
    )
    if input_format is InputFormat.JSONL:
        return JsonlReader(
            sniffed,
            max_field_chars=limits.max_field_chars,
            max_record_chars=limits.max_record_chars,
            start_line=start_line,
            start_offset=start_offset,
        )
    reader = FastCsvReader if config.compiled and FastCsvReader is not None else CsvReader
    return reader(
        sniffed,
        max_field_chars=limits.max_field_chars,
        max_record_chars=limits.max_record_chars,
        start_line=start_line,
        start_offset=start_offset,
    )

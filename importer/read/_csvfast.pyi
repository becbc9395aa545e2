"""Stub of the compiled CSV reader (importer/read/_csvfast.pyx)."""

from importer.read.csvfile import CsvReader
from importer.read.records import RawRecord

DIRECT_RECORDS: bool

class FastCsvReader(CsvReader):
    def _consume(self, text: str, final: bool) -> list[RawRecord]: ...

from collections.abc import Sequence

from importer.adapters.postgres.copybin import Kind

def encode(kinds: Sequence[Kind], rows: Sequence[Sequence[object]]) -> bytearray: ...

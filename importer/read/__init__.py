"""Reading: bytes → records → batches, streaming and pure (no database, no network).

``blocks`` picks the format and the reader for a run; ``sniff`` the encoding and the delimiter;
``text`` decodes; ``csvfile``, ``jsonl`` and ``xlsx`` cut records; ``inflate`` decompresses with
a cap; ``chunker`` turns rows into the batches of each key partition.

Streaming readers of import files: bytes in, records out (pure, no I/O).

``sniff`` picks the encoding and the delimiter from the first bytes; ``CsvReader`` and
``JsonlReader`` turn a stream of byte blocks into records that carry the physical line where
they start and the byte offset just after them; ``GzipInflater`` decompresses with a cap.

CSV records are cut exactly as Python's csv module cuts them (quotes open a field only at its
start, "" inside quotes, CRLF/LF/CR line ends), then split with str.split when they hold no
quote and by csv otherwise. Memory stays bounded by the record cap plus one block whatever the
input: a record over the cap is skipped by keeping only the parser's state (as a prefix of at
most two characters), never its text, and it is reported ``field_too_long`` at its real end.
Undecodable bytes are decoded as lone surrogates (U+DC00 + byte), so a bad record never stops
the stream: any record holding one is reported ``invalid_encoding``, and U+FFFD never appears.
"""

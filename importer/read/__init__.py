"""Reading: bytes → records → batches, streaming and pure (no database, no network).

``blocks`` (:class:`~importer.read.blocks.BlockParser`) runs the whole path for one run: it
inflates gzip (``inflate``), sniffs the encoding and the delimiter from the first bytes
(``sniff``), picks the reader of the format and hands its records to the ``chunker``, which turns
them into rows and cuts the batches of each key partition. ``text`` decodes bytes (undecodable
ones kept, escaped) and holds the character checks; ``records`` the types readers yield;
``base`` what the two text readers share; ``csvfile`` (:class:`CsvReader`) and ``jsonl``
(:class:`JsonlReader`) turn a stream of byte blocks into records that carry the physical line
where they start and the byte offset just after them; ``xlsx`` reads a workbook's sheet as CSV
records.
"""

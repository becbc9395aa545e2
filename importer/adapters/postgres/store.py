"""The :class:`importer.ports.Store` on PostgreSQL (asyncpg): what one run of the pipeline
writes and reads: the job's row (:mod:`.jobs`), its batches (:mod:`.batches`), its turn and
lanes (:mod:`.lanes`), and what it writes outside its batches (:mod:`.previews`). The
workers' queue (:mod:`.queue`) extends it with the lease; the API's jobs (:mod:`.views`), the
owner's operations (:mod:`.admin`), the catalog and the outbox are classes of their own on the
same pool.
"""

from __future__ import annotations

import asyncpg

from importer.adapters.postgres.batches import PostgresBatches
from importer.adapters.postgres.jobs import PostgresJobs
from importer.adapters.postgres.lanes import PostgresTurns
from importer.adapters.postgres.previews import PostgresPreviews
from importer.core.config import DEFAULT_MAX_ROW_ERRORS


class PostgresStore(PostgresJobs, PostgresBatches, PostgresTurns, PostgresPreviews):
    """The :class:`importer.ports.Store`: the pipeline's batches, its job's row, and what it
    writes outside its batches (a preview, a validation)."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        compiled: bool = True,
        max_row_errors: int = DEFAULT_MAX_ROW_ERRORS,
    ) -> None:
        """``compiled``: encode the batches' COPY payloads in C (when it is built);
        ``max_row_errors``: the error report's cap per job (IMPORTER_MAX_ROW_ERRORS)."""
        PostgresJobs.__init__(self, pool)
        PostgresBatches.__init__(self, pool, compiled=compiled, max_row_errors=max_row_errors)
        PostgresTurns.__init__(self, pool)
        PostgresPreviews.__init__(self, pool, compiled=compiled, max_row_errors=max_row_errors)

"""The compiled twin of ``importer.core.codec`` (``_codec.pyx``)."""

import uuid

from importer.core.codec import BatchMessage
from importer.core.models import Batch, Limits

def encode(job_id: uuid.UUID, owner: str, batch: Batch) -> bytes: ...
def decode(body: bytes, limits: Limits | None = None) -> BatchMessage: ...

import uuid
from collections.abc import Sequence

from importer.adapters.postgres.copybin import Kind
from importer.core.merge import BatchPlan

def encode(kinds: Sequence[Kind], rows: Sequence[Sequence[object]]) -> bytearray: ...
def encode_plan(
    plan: BatchPlan, ids: Sequence[int], client: int, job_id: uuid.UUID, field_ids: dict[str, int]
) -> tuple[bytearray, bytearray, bytearray]: ...

"""One exception root, grouped by kind; each subclass's docstring is its default message.

The kinds a caller answers alike are classes (``NotFoundError``, ``ConflictError``,
``RefusedError``); the services' failures are families of their own (``StoreError``,
``StorageError``, ``BrokerError``: unavailable unless a subclass says otherwise), and the run's
internal signals (a batch already applied, a lane not ready, a lease lost) are never answered.

Each class also says how the HTTP edge answers it: ``http_status`` and ``code`` (the API's
``{"error": code, "message": ...}``), inherited like any class attribute, so a subclass answers
as its nearest ancestor unless it names its own. A 5xx answer carries ``http_message`` instead
of the error's own text: driver and storage texts stay in the logs. Errors no route raises keep
the root's 500 ``internal_error``.
"""

from __future__ import annotations

from typing import ClassVar

from importer.core.models import Reason
from importer.core.unreachable import explain, mask_url


class ImporterError(Exception):
    """An importer error occurred."""

    http_status: ClassVar[int] = 500
    code: ClassVar[str] = "internal_error"
    http_message: ClassVar[str] = "internal error"  # a 5xx answer's message (never str(self))

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


# --- the kinds a caller answers alike -------------------------------------------------------------


class NotFoundError(ImporterError):
    """The object does not exist (or belongs to another tenant: the same answer)."""

    http_status = 404
    code = "not_found"


class ConflictError(ImporterError):
    """The object is not in a state that allows this."""

    http_status = 409
    code = "conflict"


class RefusedError(ImporterError):
    """The request is refused as it stands (its content, its caller, its size or its rate)."""

    http_status = 400
    code = "refused"


# --- configuration and input ----------------------------------------------------------------------


class ConfigurationError(ImporterError):
    """The configuration is invalid."""


class MigrationBlockedError(ConfigurationError):
    """The database holds data the importer's schema cannot be applied over."""


class LayoutError(RefusedError):
    """The import layout is invalid.

    ``field`` is the path of the part at fault inside the layout (``layout.delimeter``,
    ``layout.columns.Zap``), so an API client gets it in its ``[{field, message}]`` list.
    """

    code = "invalid_layout"

    def __init__(self, message: str, field: str = "layout") -> None:
        super().__init__(message)
        self.field = field


class FileRejectedError(ImporterError):
    """The file cannot be imported."""

    def __init__(self, reason: Reason, detail: str | None = None) -> None:
        super().__init__(detail or reason.value)
        self.reason = reason
        self.detail = detail or reason.value


# --- not found ------------------------------------------------------------------------------------


class JobNotFoundError(NotFoundError):
    """The import job does not exist."""


class LayoutNotFoundError(NotFoundError):
    """The layout does not exist."""


class FieldError(ImporterError):
    """An error about one field of the request (``field``: its path, e.g. ``columns[2].target``):
    its 404 or 409 answer also lists it as ``errors: [{field, message}]``, as a 400 does."""

    def __init__(self, message: str | None = None, field: str = "") -> None:
        super().__init__(message)
        self.field = field


class CustomFieldNotFoundError(FieldError, NotFoundError):
    """The custom field does not exist."""

    code = "custom_field_not_found"


# --- conflicts ------------------------------------------------------------------------------------


class IllegalTransitionError(ConflictError):
    """The job cannot move to that status from its current one."""

    code = "illegal_transition"


class ColumnsLockedError(FieldError, ConflictError):
    """The import has already started: its columns can no longer be mapped."""

    code = "import_already_started"


class ColumnsUnavailableError(ConflictError):
    """The import's file cannot be read for its columns (not uploaded yet, or gone)."""

    code = "columns_unavailable"


class ImportAlreadyAppliedError(ConflictError):
    """The import has already started or finished: it cannot be applied again."""

    code = "import_already_applied"


class UndoConflictError(ConflictError):
    """Another writer changed what the undo would restore: undo the later imports first."""

    code = "undo_conflict"

    def __init__(self, message: str, conflicts: list[tuple[int, list[str]]]) -> None:
        super().__init__(message)
        self.conflicts = conflicts  # (contact id, the imports whose journals name it), ≤ 100


class JourneyStartedError(ConflictError):
    """The import's journey classification has started (ACTIVE, DONE or EXPIRED): the journey
    processed its contacts, so the undo leaves the import and its links as they are."""

    code = "journey_started"


class UndoFailedError(ImporterError):
    """A step of the undo failed: the import is ``failed`` with the reason; undo it again once
    the cause is gone (it resumes where it stopped)."""

    http_status = 409
    code = "undo_failed"


class RetentionExpiredError(ImporterError):
    """The import's undo journal is past its retention (IMPORTER_RETENTION_DAYS): purged."""

    http_status = 410
    code = "retention_expired"


class PreviewExpiredError(ConflictError):
    """The preview waited longer than its time to live: it is cancelled, not applied."""

    code = "preview_expired"


class NotAPreviewError(ConflictError):
    """Only a preview resting in ``ready`` can be applied."""

    code = "not_a_preview"


class JobNotReadyError(ConflictError):
    """The import's file has not been uploaded yet."""

    code = "not_uploaded"


class UploadMissingError(ConflictError):
    """The file has not been uploaded yet: PUT it to the upload URL first."""

    code = "upload_missing"


class NoBrokerError(ConflictError):
    """No message broker is configured (RABBITMQ_URL): there is no dead-letter queue."""

    code = "no_broker"


# --- refused requests -----------------------------------------------------------------------------


class AuthenticationError(RefusedError):
    """The bearer token is missing, malformed, expired or badly signed."""

    http_status = 401
    code = "unauthorized"


class PermissionDeniedError(RefusedError):
    """The token does not grant the permission this operation needs."""

    http_status = 403
    code = "forbidden"


class InvalidRequestError(RefusedError):
    """The request is invalid."""

    code = "invalid_request"  # not answered: a 400's body is the list of field problems

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{field}: {message}" for field, message in problems))
        self.problems = problems  # (field, message), the API's 400 list


class RequestTooLargeError(RefusedError):
    """The request body is larger than the configured limit."""

    http_status = 413
    code = "too_large"


class UnsupportedMediaTypeError(RefusedError):
    """The request's Content-Type is not accepted here."""

    http_status = 415
    code = "unsupported_media_type"


class RateLimitedError(RefusedError):
    """Too many imports created; retry later."""

    http_status = 429
    code = "rate_limited"

    def __init__(self, retry_after_s: int, message: str | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


# --- the services behind the importer: unavailable (503) unless a subclass says otherwise ---------


class StoreError(ImporterError):
    """The database refused or lost an operation."""

    http_status = 503
    code = "database_unavailable"
    http_message = "the database is unavailable; retry later"


class TransientStoreError(StoreError):
    """The database operation failed for a reason that may pass (connection, lock, deadlock)."""


class ContentRefusedError(StoreError):
    """The database refused the content of a batch (a constraint, a value it cannot store)."""


class StorageError(ImporterError):
    """The object store refused or lost an operation."""

    http_status = 503
    code = "storage_unavailable"
    http_message = "the object store is unavailable; retry later"


class ObjectNotFoundError(StorageError):
    """The object does not exist."""

    http_status = 404
    code = "not_found"


class ObjectTooLargeError(StorageError):
    """The object is larger than the configured limit."""

    http_status = 413
    code = "too_large"


class ChecksumMismatchError(StorageError):
    """The object's size or sha256 differs from the values sealed on the import."""

    http_status = 409
    code = "checksum_mismatch"


class InvalidObjectKeyError(StorageError):
    """The object key is empty, too long, absolute, or has a NUL or a '.', '..' or empty segment."""

    http_status = 400
    code = "invalid_key"


class BrokerError(ImporterError):
    """The message broker refused or lost a message (nack, return, or a lost connection)."""

    http_status = 503
    code = "broker_unavailable"
    http_message = "the message broker is unavailable; retry later"


class WebhookSendError(ImporterError):
    """A webhook attempt failed before the receiver answered (connect, TLS, timeout)."""


class WebhookConnectError(WebhookSendError):
    """A webhook's address refused or could not be reached: the host's next one may do."""


class MalformedMessageError(ImporterError):
    """A chunk message cannot be parsed: it goes to the dead-letter queue, never retried."""


class AcceleratorError(ImporterError):
    """Redis (the optional accelerator) does not answer."""


class ServiceUnreachableError(ImporterError):
    """A configured service does not answer."""

    service = "a service"

    def __init__(self, url: str, cause: str) -> None:
        super().__init__(f"{self.service} at {mask_url(url)} does not answer: {cause}")
        self.url = url
        self.cause = cause

    def explained(self) -> str:
        """The command line's message: what was tried, why it failed, what to do."""
        return explain(self.service, self.url, self.cause)


class DatabaseUnreachableError(TransientStoreError, ServiceUnreachableError):
    """PostgreSQL does not answer."""

    service = "PostgreSQL"


class BrokerUnreachableError(BrokerError, ServiceUnreachableError):
    """RabbitMQ does not answer (or refuses the connection)."""

    service = "RabbitMQ"


class StorageUnreachableError(StorageError, ServiceUnreachableError):
    """The S3 endpoint does not answer."""

    service = "S3"


# --- signals inside a run (never answered) --------------------------------------------------------


class BatchAlreadyAppliedError(ImporterError):
    """This chunk was already applied: the repeat is a no-op."""


class LaneNotReadyError(ImporterError):
    """An earlier chunk of this batch's key partition has not been applied yet: wait."""

    def __init__(self, message: str, position: int | None) -> None:
        super().__init__(message)
        self.position = position  # the chunk the lane stands at (None: the job has no lanes)


class LaneSplitError(ImporterError):
    """Another delivery of this batch split it and committed pieces: go on piece by piece."""

    def __init__(self, message: str, done_parts: frozenset[int]) -> None:
        super().__init__(message)
        self.done_parts = done_parts  # the pieces the ledger holds


class LeaseLostError(ImporterError):
    """Another worker took over this import."""

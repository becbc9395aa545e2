"""One exception root; each subclass's docstring is its default message."""

from __future__ import annotations

from importer.core.models import Reason
from importer.core.unreachable import explain, mask_url


class ImporterError(Exception):
    """An importer error occurred."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class ConfigurationError(ImporterError):
    """The configuration is invalid."""


class LayoutError(ImporterError):
    """The import layout is invalid.

    ``field`` is the path of the part at fault inside the layout (``layout.delimeter``,
    ``layout.columns.Zap``), so an API client gets it in its ``[{field, message}]`` list.
    """

    def __init__(self, message: str, field: str = "layout") -> None:
        super().__init__(message)
        self.field = field


class FileRejectedError(ImporterError):
    """The file cannot be imported."""

    def __init__(self, reason: Reason, detail: str | None = None) -> None:
        super().__init__(detail or reason.value)
        self.reason = reason
        self.detail = detail or reason.value


class JobNotFoundError(ImporterError):
    """The import job does not exist."""


class IllegalTransitionError(ImporterError):
    """The job cannot move to that status from its current one."""


class StoreError(ImporterError):
    """The database refused or lost an operation."""


class TransientStoreError(StoreError):
    """The database operation failed for a reason that may pass (connection, lock, deadlock)."""


class ContentRefusedError(StoreError):
    """The database refused the content of a batch (a constraint, a value it cannot store)."""


class BatchAlreadyAppliedError(ImporterError):
    """This chunk was already applied: the repeat is a no-op."""


# --- jobs -------------------------------------------------------------------------------------


class ImportAlreadyAppliedError(ImporterError):
    """The import has already started or finished: it cannot be applied again."""


class JobNotReadyError(ImporterError):
    """The import's file has not been uploaded yet."""


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


# --- object storage ---------------------------------------------------------------------------


class StorageError(ImporterError):
    """The object store refused or lost an operation."""


class ObjectNotFoundError(StorageError):
    """The object does not exist."""


class ObjectTooLargeError(StorageError):
    """The object is larger than the configured limit."""


class ChecksumMismatchError(StorageError):
    """The object's size or sha256 differs from the values sealed on the import."""


class InvalidObjectKeyError(StorageError):
    """The object key is empty, too long, absolute, or has a NUL or a '.', '..' or empty segment."""


# --- message broker ---------------------------------------------------------------------------


class BrokerError(ImporterError):
    """The message broker refused or lost a message (nack, return, or a lost connection)."""


class MalformedMessageError(ImporterError):
    """A chunk message cannot be parsed: it goes to the dead-letter queue, never retried."""


# --- authentication ---------------------------------------------------------------------------


class AuthenticationError(ImporterError):
    """The bearer token is missing, malformed, expired or badly signed."""


class PermissionDeniedError(ImporterError):
    """The token does not grant the permission this operation needs."""


# --- http -------------------------------------------------------------------------------------


class InvalidRequestError(ImporterError):
    """The request is invalid."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{field}: {message}" for field, message in problems))
        self.problems = problems  # (field, message), the API's 400 list


class LayoutNotFoundError(ImporterError):
    """The layout does not exist."""


class UploadMissingError(ImporterError):
    """The file has not been uploaded yet: PUT it to the upload URL first."""


class RequestTooLargeError(ImporterError):
    """The request body is larger than the configured limit."""


class UnsupportedMediaTypeError(ImporterError):
    """The request's Content-Type is not accepted here."""


class RateLimitedError(ImporterError):
    """Too many imports created; retry later."""

    def __init__(self, retry_after_s: int, message: str | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class AcceleratorError(ImporterError):
    """Redis (the optional accelerator) does not answer."""


class NoBrokerError(ImporterError):
    """No message broker is configured (RABBITMQ_URL): there is no dead-letter queue."""


# --- services that do not answer -------------------------------------------------------------


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

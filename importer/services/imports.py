"""The HTTP API's use cases: create, upload, start, watch, list and cancel imports; layouts.

:class:`ImportService` is what the routes (``http/routes/``) call: the edge parses HTTP, this
module decides. The caller is always a verified :class:`Principal`; tenant and user come from
it, never from a body. Decisions that need no I/O are plain functions, tested on their own:
the job's document with progress and ETA (``services/documents.py``), the history query below,
request validation in ``core/options.py``.

Visibility: a job belongs to the user who created it. A caller without ``IMPORT.ADMIN`` sees and
acts on its own jobs only (another user's job answers 404, like another tenant's); an admin sees
every job of its tenant. History filters by user: plain users always get their own.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from importer.core.duplicates import Competition
from importer.core.errors import (
    ChecksumMismatchError,
    IllegalTransitionError,
    InvalidRequestError,
    JobNotFoundError,
    LayoutNotFoundError,
    ObjectNotFoundError,
    ObjectTooLargeError,
    PermissionDeniedError,
    UploadMissingError,
)
from importer.core.history import HistoryQuery, Page
from importer.core.models import (
    TERMINAL_STATUSES,
    InputFormat,
    JobStatus,
    JobView,
    NewJob,
    Reason,
    RowIssue,
    StoredLayout,
)
from importer.core.objects import StoredObject
from importer.core.options import (
    OPTION_FIELDS,
    FiringIntent,
    ImportOptions,
    Problems,
    SealedFile,
    check_fields,
    display_filename,
    object_key,
    parse_bool,
    parse_intent,
    parse_layout_body,
    parse_options,
    parse_sealed,
    tenant_key_problem,
)
from importer.core.principals import Permission, Principal
from importer.ports import CatalogStore, JobStore, LocalFiles, ObjectStore, Resolver
from importer.services.documents import decode_cursor, encode_cursor
from importer.services.reports import available_source, source_report
from importer.services.runs import format_for, job_config
from importer.services.webhooks import check_notify_url
from importer.settings import Settings

# A multipart create's field: "false" leaves the job uploaded, for its columns step (issue 29).
START_FIELD = "start"

# Lifetime of a presigned (or self-hosted) upload URL.
UPLOAD_URL_TTL_S = 3600


# Kinds of jobs (``import_job.kind``).
KIND_CONTACTS = "contacts"


KIND_HSM = "hsm"


READ_PERMISSIONS = (
    Permission.CONTACT_IMPORT_CREATE,
    Permission.HSM_CREATE,
    Permission.IMPORT_ADMIN,
)


@dataclass(frozen=True, slots=True)
class PlannedUpload:
    """A file about to be streamed in: the job it will belong to and where it goes."""

    job_id: uuid.UUID
    key: str
    filename: str


@dataclass(frozen=True, slots=True)
class UploadTarget:
    url: str
    method: str
    expires_in_s: int
    presigned: bool


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class ImportService:
    """Every API operation, checked against the caller's tenant, user and permissions."""

    def __init__(
        self,
        jobs: JobStore,
        catalog: CatalogStore,
        objects: ObjectStore,
        settings: Settings,
        clock: Callable[[], dt.datetime] = utc_now,
        local_files: LocalFiles | None = None,
        resolver: Resolver | None = None,  # a notify_url's addresses (None: refused)
    ) -> None:
        self._jobs = jobs
        self._resolver = resolver
        self._catalog = catalog
        self._objects = objects
        self._settings = settings
        self.clock = clock
        self._local_files = local_files  # a command line's files, where this service runs

    # --- creating from a stream (multipart) ---------------------------------------------------

    def check_upload(self, principal: Principal, *, hsm: bool = False) -> None:
        """May the caller upload? Asked before a byte of the body is read."""
        principal.require(Permission.HSM_CREATE if hsm else Permission.CONTACT_IMPORT_CREATE)

    def plan_upload(self, principal: Principal, filename: str) -> PlannedUpload:
        """Name the object a file will be stored as, under a new job id."""
        job_id = uuid.uuid4()
        shown = display_filename(filename)
        return PlannedUpload(job_id, object_key(principal.client_id, job_id, filename), shown)

    async def receive(self, planned: PlannedUpload, chunks: AsyncIterator[bytes]) -> StoredObject:
        """Stream a file into the store, hashing it; past the limit nothing is left behind."""
        limit = self._settings.max_upload_bytes
        stored = await self._objects.put_stream(planned.key, chunks, limit)
        if stored.size == 0:
            await self._objects.delete(planned.key)
            raise InvalidRequestError([("file", "is empty")])
        return stored

    async def discard(self, planned: PlannedUpload) -> None:
        await self._objects.delete(planned.key)

    async def queue_received(
        self,
        principal: Principal,
        planned: PlannedUpload,
        stored: StoredObject,
        fields: Mapping[str, str],
        *,
        hsm: bool = False,
        operation_id: str | None = None,
    ) -> JobView:
        """Create the job of a received file (``uploaded``) and queue it for a worker.

        Invalid options remove the stored file: no job, no object.
        """
        self.check_upload(principal, hsm=hsm)
        try:
            options, intent = await self._form_options(principal, fields, hsm=hsm)
            start = _start_now(fields)
        except BaseException:
            await self.discard(planned)
            raise
        new_job = self._new_job(
            principal,
            options,
            job_id=planned.job_id,
            key=planned.key,
            filename=planned.filename,
            sealed=SealedFile(stored.size, stored.sha256),
            kind=KIND_HSM if hsm else KIND_CONTACTS,
        )
        await self._catalog.create_linked_job(new_job, JobStatus.UPLOADED, intent)
        if not start:  # its columns step first (``start=false``): POST …/start later
            return await self._view(principal, planned.job_id)
        return await self._jobs.start_job(
            principal.client_id, planned.job_id, operation_id or f"create:{planned.job_id}"
        )

    async def _form_options(
        self, principal: Principal, fields: Mapping[str, str], *, hsm: bool
    ) -> tuple[ImportOptions, FiringIntent | None]:
        problems = Problems()
        allowed = (*OPTION_FIELDS, "intent") if hsm else (*OPTION_FIELDS, START_FIELD)
        check_fields(fields, allowed, problems)
        if START_FIELD in fields:
            try:
                parse_bool(fields[START_FIELD])
            except ValueError as exc:
                problems.add(START_FIELD, str(exc))
        intent = None
        if hsm:
            try:
                intent = parse_intent(fields.get("intent"))
            except (ValueError, TypeError) as exc:
                problems.add("intent", str(exc) if "intent" in fields else "is required")
        return await self._options(principal, fields, problems=problems), intent

    # --- creating from a key, or for a presigned upload ---------------------------------------

    async def create_from_key(self, principal: Principal, raw: Mapping[str, object]) -> JobView:
        """A job ``uploaded`` for a file already in the store under the tenant's prefix."""
        principal.require(Permission.CONTACT_IMPORT_CREATE)
        problems = Problems()
        check_fields(raw, (*OPTION_FIELDS, "key", "size", "sha256", "filename"), problems)
        key_why = tenant_key_problem(principal.client_id, raw.get("key"))
        if key_why is not None:
            problems.add("key", key_why)
        sealed = parse_sealed(raw, problems, self._settings.limits.max_file_bytes)
        options = await self._options(principal, raw, problems=problems)
        key = str(raw["key"])
        filename = display_filename(str(raw.get("filename") or key))
        job_id = uuid.uuid4()
        new_job = self._new_job(
            principal, options, job_id=job_id, key=key, filename=filename, sealed=sealed
        )
        await self._catalog.create_linked_job(new_job, JobStatus.UPLOADED, None)
        return await self._view(principal, job_id)

    async def create_upload(
        self, principal: Principal, raw: Mapping[str, object]
    ) -> tuple[JobView, UploadTarget]:
        """A job ``uploading`` and the URL the client PUTs the file to."""
        principal.require(Permission.CONTACT_IMPORT_CREATE)
        problems = Problems()
        check_fields(raw, (*OPTION_FIELDS, "filename", "size", "sha256"), problems)
        filename = raw.get("filename")
        if not isinstance(filename, str) or not filename.strip():
            problems.add("filename", "is required")
            filename = ""
        declared = raw.get("size")
        if isinstance(declared, int) and declared > self._settings.max_upload_bytes:
            raise ObjectTooLargeError(
                f"the file is larger than {self._settings.max_upload_bytes} bytes"
            )
        sealed = parse_sealed(raw, problems, self._settings.max_upload_bytes)
        options = await self._options(principal, raw, problems=problems)
        planned = self.plan_upload(principal, filename)
        new_job = self._new_job(
            principal,
            options,
            job_id=planned.job_id,
            key=planned.key,
            filename=planned.filename,
            sealed=sealed,
        )
        await self._catalog.create_linked_job(new_job, JobStatus.UPLOADING, None)
        return await self._view(principal, planned.job_id), await self._upload_target(planned)

    async def _upload_target(self, planned: PlannedUpload) -> UploadTarget:
        url = await self._objects.presign_put(planned.key, UPLOAD_URL_TTL_S)
        if url is not None:
            return UploadTarget(url, "PUT", UPLOAD_URL_TTL_S, presigned=True)
        own = f"{self._settings.public_url}/v1/uploads/{planned.job_id}"
        return UploadTarget(own, "PUT", UPLOAD_URL_TTL_S, presigned=False)

    async def receive_put(
        self, principal: Principal, job_id: uuid.UUID, chunks: AsyncIterator[bytes]
    ) -> StoredObject:
        """The server's own upload URL: store the body under the job's key, up to its size."""
        principal.require(Permission.CONTACT_IMPORT_CREATE)
        view = await self._view(principal, job_id)
        if view.status is not JobStatus.UPLOADING or view.source_size is None:
            raise IllegalTransitionError(f"import {job_id} is {view.status}, not uploading")
        return await self._objects.put_stream(view.source, chunks, view.source_size)

    async def upload_limit(self, principal: Principal, job_id: uuid.UUID) -> int:
        """The largest body the job's upload URL takes: the size sealed on the job."""
        principal.require(Permission.CONTACT_IMPORT_CREATE)
        view = await self._view(principal, job_id)
        return view.source_size or self._settings.max_upload_bytes

    async def confirm_upload(self, principal: Principal, job_id: uuid.UUID) -> JobView:
        """Check the stored file against the sealed size and sha256: ``uploaded`` or ``failed``.

        Repeating it on a job that is already past ``uploading`` changes nothing.
        """
        principal.require(Permission.CONTACT_IMPORT_CREATE)
        view = await self._view(principal, job_id)
        if view.status is not JobStatus.UPLOADING:
            if view.status in TERMINAL_STATUSES:
                raise IllegalTransitionError(f"import {job_id} is {view.status}")
            return view
        assert view.source_size is not None
        assert view.source_sha256 is not None
        try:
            version = await self._objects.verify(view.source, view.source_size, view.source_sha256)
        except ObjectNotFoundError:
            raise UploadMissingError() from None
        except ChecksumMismatchError:
            return await self._jobs.mark_uploaded(
                principal.client_id, job_id, ok=False, fail_reason=Reason.CHECKSUM_MISMATCH.value
            )
        return await self._jobs.mark_uploaded(
            principal.client_id, job_id, ok=True, fail_reason=None, storage_version=version
        )

    # --- one job ------------------------------------------------------------------------------

    async def start(self, principal: Principal, job_id: uuid.UUID, operation_id: str) -> JobView:
        principal.require(Permission.CONTACT_IMPORT_CREATE)
        await self._view(principal, job_id)
        return await self._jobs.start_job(principal.client_id, job_id, operation_id)

    async def apply(self, principal: Principal, job_id: uuid.UUID, operation_id: str) -> JobView:
        """A preview resting in ``ready`` handed to the workers, planned again when it runs."""
        principal.require(Permission.CONTACT_IMPORT_CREATE)
        await self._view(principal, job_id)
        return await self._jobs.apply_preview(principal.client_id, job_id, operation_id)

    async def view(self, principal: Principal, job_id: uuid.UUID) -> JobView:
        require_any(principal, READ_PERMISSIONS)
        return await self._view(principal, job_id)

    async def cancel(self, principal: Principal, job_id: uuid.UUID) -> JobView:
        require_any(principal, READ_PERMISSIONS)
        await self._view(principal, job_id)
        return await self._jobs.request_cancel(principal.client_id, job_id)

    async def row_issues(self, principal: Principal, job_id: uuid.UUID) -> AsyncIterator[RowIssue]:
        """The job's per-row report; the job is checked before the first byte is sent."""
        await self.view(principal, job_id)
        return self._jobs.row_issues(job_id)

    async def source_report(
        self, principal: Principal, job_id: uuid.UUID
    ) -> tuple[InputFormat, AsyncIterator[str]]:
        """The report as the rows the user sent (``?format=source``): the job is checked, and
        its file opened against its seal, before the first byte is sent. A file gone or
        changed since (or a command line's local file, which this service cannot read) gives
        the report of lines and reasons only, said in its first row."""
        require_any(principal, READ_PERMISSIONS)
        job = await self._jobs.stored_job(principal.client_id, job_id)
        config = job_config(self._settings, job)
        source = await available_source(job, self._objects, self._local_files)
        return job.input_format, source_report(job, source, config, self._jobs.row_issues(job_id))

    async def duplicates(
        self, principal: Principal, job_id: uuid.UUID
    ) -> AsyncIterator[Competition]:
        """The job's duplicate report; the job is checked before the first byte is sent."""
        await self.view(principal, job_id)
        return self._jobs.duplicates(job_id)

    async def history(self, principal: Principal, query: HistoryQuery) -> Page:
        """Newest first, one page after the cursor; plain users see their own jobs only."""
        require_any(principal, READ_PERMISSIONS)
        user_id = query.user_id
        if Permission.IMPORT_ADMIN not in principal.permissions:
            if user_id not in (None, principal.user_id):
                raise PermissionDeniedError("only IMPORT.ADMIN may list another user's imports")
            user_id = principal.user_id
        items = await self._jobs.list_jobs(
            principal.client_id,
            user_id=user_id,
            statuses=query.statuses or None,
            before=decode_cursor(query.cursor) if query.cursor else None,
            limit=query.limit + 1,
        )
        page = items[: query.limit]
        more = len(items) > query.limit
        cursor = encode_cursor(page[-1].created_at, page[-1].id) if more else None
        return Page(page, cursor)

    async def _view(self, principal: Principal, job_id: uuid.UUID) -> JobView:
        view = await self._jobs.view_job(principal.client_id, job_id)
        if not can_see(principal, view):
            raise JobNotFoundError(f"import {job_id} does not exist")
        return view

    # --- layouts ------------------------------------------------------------------------------

    async def create_layout(self, principal: Principal, raw: Mapping[str, object]) -> StoredLayout:
        principal.require(Permission.CONTACT_IMPORT_CREATE)
        name, document = parse_layout_body(raw)
        return await self._catalog.create_layout(principal.client_id, name, document)

    async def get_layout(self, principal: Principal, layout_id: int) -> StoredLayout:
        principal.require(Permission.CONTACT_IMPORT_CREATE)
        return await self._catalog.get_layout(principal.client_id, layout_id)

    async def list_layouts(self, principal: Principal) -> list[StoredLayout]:
        principal.require(Permission.CONTACT_IMPORT_CREATE)
        return await self._catalog.list_layouts(principal.client_id)

    async def update_layout(
        self, principal: Principal, layout_id: int, raw: Mapping[str, object]
    ) -> StoredLayout:
        principal.require(Permission.CONTACT_IMPORT_CREATE)
        name, document = parse_layout_body(raw)
        return await self._catalog.update_layout(principal.client_id, layout_id, name, document)

    async def delete_layout(self, principal: Principal, layout_id: int) -> None:
        principal.require(Permission.CONTACT_IMPORT_CREATE)
        await self._catalog.delete_layout(principal.client_id, layout_id)

    # --- shared -------------------------------------------------------------------------------

    async def _options(
        self, principal: Principal, raw: Mapping[str, object], *, problems: Problems
    ) -> ImportOptions:
        """Validate the options, resolve ``layout_id`` and check ``journey_id``, all tenant-bound.

        Raises InvalidRequestError with these problems and any found before.
        """
        options = parse_options(raw, problems)
        problems.raise_any()
        assert options is not None
        return await self._resolved(principal.client_id, options)

    async def _resolved(self, client_id: int, options: ImportOptions) -> ImportOptions:
        if options.journey_id is not None and not await self._catalog.journey_exists(
            client_id, options.journey_id
        ):
            raise InvalidRequestError([("journey_id", "no such journey")])
        if options.notify_url is not None:
            await check_notify_url(
                options.notify_url, self._resolver, self._catalog, client_id, self._settings
            )
        if options.layout_id is None:
            return options
        try:
            stored = await self._catalog.get_layout(client_id, options.layout_id)
        except LayoutNotFoundError:
            raise InvalidRequestError([("layout_id", "no such layout")]) from None
        return _with_layout(options, stored.document)

    def _new_job(
        self,
        principal: Principal,
        options: ImportOptions,
        *,
        job_id: uuid.UUID,
        key: str,
        filename: str,
        sealed: SealedFile,
        kind: str = KIND_CONTACTS,
    ) -> NewJob:
        return NewJob(
            id=job_id,
            client_id=principal.client_id,
            user_id=principal.user_id,
            source=key,
            input_format=(options.input_format or format_for(filename)).value,
            strategy=options.conflict_strategy.value,
            chunk_size=self._settings.chunk_size,
            partitions=self._settings.concurrency,
            layout=options.layout,
            has_internationalization=options.has_internationalization,
            bytes_total=sealed.size,
            journey_id=options.journey_id,
            auto_start_journey_mailing=options.auto_start_journey_mailing,
            source_size=sealed.size,
            source_sha256=sealed.sha256,
            filename=filename,
            has_sensitive_data=options.has_sensitive_data,
            has_underage_data=options.has_underage_data,
            data_processing_purpose=options.data_processing_purpose,
            lgpd_processing_hypothesis=options.lgpd_processing_hypothesis,
            tags=options.tags,
            kind=kind,
            preview=options.preview,
            max_invalid=options.max_invalid,
            notify_url=options.notify_url,
            duplicates_report=options.duplicates_report,
            journaled=self._settings.undo_journal,
        )


def _start_now(fields: Mapping[str, str]) -> bool:
    """A multipart create's ``start`` (default true): false leaves the job ``uploaded``."""
    return parse_bool(fields.get(START_FIELD, "true"))


def _with_layout(options: ImportOptions, document: dict[str, object]) -> ImportOptions:
    return replace(options, layout=document)


def can_see(principal: Principal, view: JobView) -> bool:
    """Admins see their tenant's jobs, everyone else their own (the store fixed the tenant)."""
    return Permission.IMPORT_ADMIN in principal.permissions or view.user_id == principal.user_id


def require_any(principal: Principal, permissions: Sequence[Permission]) -> None:
    if not principal.permissions & set(permissions):
        names = ", ".join(p.value for p in permissions)
        raise PermissionDeniedError(f"the token grants none of {names}")

"""The API's routes, one module per OpenAPI tag.

``ROUTERS`` is in the order the app adds them: the OpenAPI document lists paths in that order.
"""

from __future__ import annotations

from importer.http.routes import admin, columns, hsm, imports, layouts, operations, uploads

ROUTERS = (
    imports.router,
    uploads.router,
    hsm.router,
    layouts.router,
    columns.router,
    admin.router,
    operations.router,
)

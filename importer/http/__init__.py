"""The HTTP edge: the FastAPI app factory, routes, auth, forms, streamed bodies, OpenAPI and
the console."""

"""The domain, pure: values, errors, normalization, layouts and rows, merge, state machines.

Nothing here does I/O or imports a driver; the imports allowed are the standard library, orjson,
the core itself and the two well-kept pure libraries of normalization (phonenumbers,
email-validator). ``tests/unit/test_architecture.py`` holds the line.
"""

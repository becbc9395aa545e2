"""Object storage: S3 (aioboto3), a local directory, local files as sources."""

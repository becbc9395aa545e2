"""The only modules that import drivers (asyncpg, aio-pika, aioboto3, redis): one per port."""

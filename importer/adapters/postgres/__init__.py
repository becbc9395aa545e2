"""PostgreSQL (asyncpg): the pool, the migration, and one class per port."""

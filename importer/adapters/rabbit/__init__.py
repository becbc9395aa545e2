"""RabbitMQ (aio-pika): the topology and connection (``broker``), chunk messages, dead letters."""

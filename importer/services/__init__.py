"""Use cases both edges (HTTP and the command line) share: imports, admin, the CLI's local
import, the worker, the relay, leases. They talk to ports, never to drivers.
"""

"""The HTTP API: a WSGI application over the compute API and objects."""

"""The conductor: the one service with the database; object calls and compute tasks."""

# The conductor's binary, as its program and its Service record are named.
BINARY = "pcisim-conductor"

"""The Nova face's one route table: path, method, handler."""

from pcisim.api.nova import versions

V = "/v2.1"

ROUTES = (
    ("/", "GET", versions.list_versions),
    (V, "GET", versions.show_version),
    (V + "/", "GET", versions.show_version),
)

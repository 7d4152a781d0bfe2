"""The Nova face's one route table: path, method, handler."""

from pcisim.api.nova import flavors, versions

V = "/v2.1"
FLAVOR = V + "/flavors/<string:flavor_id>"
EXTRA_SPEC = FLAVOR + "/os-extra_specs/<string:key>"

ROUTES = (
    ("/", "GET", versions.list_versions),
    (V, "GET", versions.show_version),
    (V + "/", "GET", versions.show_version),
    (V + "/flavors", "GET", flavors.list_flavors),
    (V + "/flavors", "POST", flavors.create_flavor),
    (V + "/flavors/detail", "GET", flavors.list_flavors_detail),
    (FLAVOR, "GET", flavors.show_flavor),
    (FLAVOR, "DELETE", flavors.delete_flavor),
    (FLAVOR + "/os-extra_specs", "GET", flavors.list_extra_specs),
    (FLAVOR + "/os-extra_specs", "POST", flavors.create_extra_specs),
    (EXTRA_SPEC, "GET", flavors.show_extra_spec),
    (EXTRA_SPEC, "PUT", flavors.update_extra_spec),
    (EXTRA_SPEC, "DELETE", flavors.delete_extra_spec),
)

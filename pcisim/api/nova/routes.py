"""The Nova face's one route table: path, method, handler."""

from pcisim.api.nova import flavors, hypervisors, identity, images, servers, versions

V = "/v2.1"
FLAVOR = V + "/flavors/<string:flavor_id>"
EXTRA_SPEC = FLAVOR + "/os-extra_specs/<string:key>"
SERVER = V + "/servers/<string:server_id>"
HYPERVISOR = V + "/os-hypervisors/<string:hypervisor_id>"
# NOTE: with one endpoint for everything, clients send image calls to the compute base
# (/v2.1/images; novaclient /v2.1/v2/images); they are also at an image endpoint.
IMAGE_BASES = (V, V + "/v2", "/image/v2")

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
    (V + "/servers", "POST", servers.create_server),
    (V + "/servers", "GET", servers.list_servers),
    (V + "/servers/detail", "GET", servers.list_servers_detail),
    (SERVER, "GET", servers.show_server),
    (SERVER, "DELETE", servers.delete_server),
    (V + "/os-hypervisors", "GET", hypervisors.list_hypervisors),
    (V + "/os-hypervisors/detail", "GET", hypervisors.list_hypervisors_detail),
    (HYPERVISOR, "GET", hypervisors.show_hypervisor),
    (V + "/os-aggregates", "GET", hypervisors.list_aggregates),
    ("/image", "GET", images.list_image_versions),
    ("/identity", "GET", identity.list_identity_versions),
    ("/identity/v3", "GET", identity.show_identity_version),
    ("/identity/v3/auth/tokens", "POST", identity.create_token),
    *(
        route
        for base in IMAGE_BASES
        for route in (
            (base + "/images", "GET", images.list_images),
            (base + "/images/<string:image_ref>", "GET", images.show_image),
        )
    ),
)

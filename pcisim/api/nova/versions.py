"""Version discovery: ``GET /`` lists the compute API's versions, ``GET /v2.1`` gives
v2.1 with the microversions it serves, as keystoneauth's discovery reads them."""

from pcisim.api import validation
from pcisim.api.nova import face, microversion
from pcisim.api.nova import schemas as nova_schemas

UPDATED = "2013-07-23T11:33:21Z"


def version(req):
    return {
        "id": "v2.1",
        "status": "CURRENT",
        "version": str(microversion.MAX_VERSION),
        "min_version": str(microversion.MIN_VERSION),
        "updated": UPDATED,
        "links": [{"rel": "self", "href": req.link(face.COMPUTE_PREFIX + "/")}],
        "media-types": [
            {
                "base": "application/json",
                "type": "application/vnd.openstack.compute+json;version=2.1",
            }
        ],
    }


@validation.response_body_schema(nova_schemas.VERSION_LIST)
def list_versions(api, context, req):
    """The versions of the compute API."""
    return {"versions": [version(req)]}


@validation.response_body_schema(nova_schemas.VERSION_SHOW)
def show_version(api, context, req):
    """Compute API v2.1 and its microversions."""
    return {"version": version(req)}

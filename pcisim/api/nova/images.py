"""A minimal Glance v2 face: the images of ``[api] images``, all active and public.

``openstack server create --image`` resolves the image through the image service, and
with one endpoint for everything clients send those calls to the compute base
(``/v2.1/images``, novaclient ``/v2.1/v2/images``); they are served there, and at an
image endpoint of its own (``/image``) for a clouds.yaml that names one. An image's id
is derived from its name, so it is the same in every process and across restarts.
"""

import uuid

from oslo_config import cfg

from pcisim import exception
from pcisim.api import validation
from pcisim.api.nova import face
from pcisim.api.nova import schemas as nova_schemas

CONF = cfg.CONF
NAMESPACE = uuid.UUID("6f1d5e1c-8d2a-4c4e-9a57-7f0f1f6c2c11")
CREATED = "2026-01-01T00:00:00Z"


def image_id(name):
    return str(uuid.uuid5(NAMESPACE, name))


def configured():
    """The configured images, by id."""
    return {image_id(name): name for name in CONF.api.images}


def get(image_ref):
    """The name of image ``image_ref`` (an id); ``ImageNotFound`` when none has it."""
    name = configured().get(image_ref)
    if name is None:
        raise exception.ImageNotFound(image_id=image_ref)
    return name


def view(image_ref, name):
    return {
        "id": image_ref,
        "name": name,
        "status": "active",
        "visibility": "public",
        "protected": False,
        "os_hidden": False,
        "container_format": "bare",
        "disk_format": "qcow2",
        "min_disk": 0,
        "min_ram": 0,
        "size": 0,
        "checksum": None,
        "owner": None,
        "tags": [],
        "created_at": CREATED,
        "updated_at": CREATED,
        "self": f"/v2/images/{image_ref}",
        "file": f"/v2/images/{image_ref}/file",
        "schema": "/v2/schemas/image",
    }


@validation.query_schema(nova_schemas.IMAGE_QUERY)
@validation.response_body_schema(nova_schemas.IMAGE_LIST)
def list_images(api, context, req, query):
    """Images, by ``name`` or ``id=in:A,B`` when asked."""
    images = configured().items()
    if "name" in query:
        images = [(i, n) for i, n in images if n == query["name"]]
    if "id" in query:
        wanted = set(query["id"].removeprefix("in:").split(","))
        images = [(i, n) for i, n in images if i in wanted]
    return {"images": [view(i, n) for i, n in images], "schema": "/v2/schemas/images"}


@validation.response_body_schema(nova_schemas.IMAGE)
def show_image(api, context, req, image_ref):
    """An image, unwrapped as Glance answers."""
    return view(image_ref, get(image_ref))


@validation.response_body_schema(nova_schemas.IMAGE_VERSIONS)
def list_image_versions(api, context, req):
    """The image API's version: v2."""
    return {
        "versions": [
            {
                "id": "v2.16",
                "status": "CURRENT",
                "links": [{"rel": "self", "href": req.link(face.IMAGE_PREFIX + "/v2/")}],
            }
        ]
    }

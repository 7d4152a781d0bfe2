"""/v2.1/flavors: flavors and their extra specs, in Nova's view.

From 2.55 a flavor shows its description, from 2.61 its extra specs, from 2.75 a swap
of 0 as 0 (before: ""). Creating a flavor and setting extra specs go through the
compute API, which checks the extra specs pcisim reads (``compute.flavors``).
"""

import uuid

from pcisim import exception
from pcisim.api import validation
from pcisim.api.nova import schemas
from pcisim.objects.flavor import Flavor, FlavorList

PUBLIC = "os-flavor-access:is_public"
EPHEMERAL = "OS-FLV-EXT-DATA:ephemeral"
DISABLED = "OS-FLV-DISABLED:disabled"


def summary(req, flavor):
    view = {
        "id": flavor.flavorid,
        "name": flavor.name,
        "links": req.links("flavors", flavor.flavorid),
    }
    if req.at_least("2.55"):
        view["description"] = flavor.description
    return view


def detail(req, flavor):
    view = {
        **summary(req, flavor),
        "ram": flavor.memory_mb,
        "disk": flavor.root_gb,
        "vcpus": flavor.vcpus,
        EPHEMERAL: flavor.ephemeral_gb,
        DISABLED: flavor.disabled,
        "swap": flavor.swap if flavor.swap or req.at_least("2.75") else "",
        "rxtx_factor": 1.0,
        PUBLIC: flavor.is_public,
    }
    if req.at_least("2.61"):
        view["extra_specs"] = dict(flavor.extra_specs)
    return view


@validation.query_schema(schemas.FLAVOR_QUERY)
@validation.response_body_schema(schemas.FLAVOR_LIST)
def list_flavors(api, context, req, query):
    """Flavors: id, name and links."""
    return {"flavors": [summary(req, flavor) for flavor in _listed(context, query)]}


@validation.query_schema(schemas.FLAVOR_QUERY)
@validation.response_body_schema(schemas.FLAVOR_DETAIL_LIST)
def list_flavors_detail(api, context, req, query):
    """Flavors with their sizes (and extra specs from 2.61)."""
    return {"flavors": [detail(req, flavor) for flavor in _listed(context, query)]}


def _listed(context, query):
    return FlavorList.get_all(
        context,
        is_public=_is_public(query.get("is_public")),
        min_memory_mb=_minimum(query, "minRam"),
        min_root_gb=_minimum(query, "minDisk"),
    )


def _is_public(value):
    """As Nova reads ``is_public``: absent is true, ``None`` is either."""
    return True if value is None else schemas.FLAVOR_PUBLIC_VALUES[value]


def _minimum(query, name):
    return int(query[name]) if name in query else None


@validation.schema(schemas.FLAVOR_CREATE)
@validation.error_statuses(**{"409": "a flavor has this id or name"})
@validation.response_body_schema(schemas.FLAVOR_SHOW)
def create_flavor(api, context, req, body):
    """Create a flavor."""
    spec = body["flavor"]
    flavor = api.compute.create_flavor(
        context,
        flavorid=str(uuid.uuid4() if spec.get("id") is None else spec["id"]),
        name=spec["name"],
        memory_mb=spec["ram"],
        vcpus=spec["vcpus"],
        root_gb=spec["disk"],
        ephemeral_gb=spec.get(EPHEMERAL, 0),
        swap=int(spec.get("swap") or 0),
        is_public=spec.get(PUBLIC, True),
        disabled=False,
        description=spec.get("description"),
    )
    return {"flavor": detail(req, flavor)}


@validation.response_body_schema(schemas.FLAVOR_SHOW)
def show_flavor(api, context, req, flavor_id):
    """A flavor."""
    return {"flavor": detail(req, Flavor.get_by_flavor_id(context, flavor_id))}


@validation.response_body_schema(None, status=202)
def delete_flavor(api, context, req, flavor_id):
    """Delete a flavor; servers built from it keep their copy."""
    Flavor.get_by_flavor_id(context, flavor_id).destroy()


@validation.response_body_schema(schemas.EXTRA_SPECS)
def list_extra_specs(api, context, req, flavor_id):
    """A flavor's extra specs."""
    return {"extra_specs": dict(Flavor.get_by_flavor_id(context, flavor_id).extra_specs)}


@validation.schema(schemas.EXTRA_SPECS_CREATE)
@validation.response_body_schema(schemas.EXTRA_SPECS)
def create_extra_specs(api, context, req, flavor_id, body):
    """Set extra specs, keeping the flavor's others."""
    specs = _text(body["extra_specs"])
    api.compute.update_flavor_extra_specs(
        context, Flavor.get_by_flavor_id(context, flavor_id), specs
    )
    return {"extra_specs": specs}


@validation.response_body_schema(schemas.EXTRA_SPEC)
def show_extra_spec(api, context, req, flavor_id, key):
    """One extra spec."""
    specs = Flavor.get_by_flavor_id(context, flavor_id).extra_specs
    if key not in specs:
        raise exception.FlavorExtraSpecsNotFound(flavor_id=flavor_id, extra_specs_key=key)
    return {key: specs[key]}


@validation.schema(schemas.EXTRA_SPEC_UPDATE)
@validation.response_body_schema(schemas.EXTRA_SPEC)
def update_extra_spec(api, context, req, flavor_id, key, body):
    """Set one extra spec; the body names the key of the path."""
    if list(body) != [key]:
        raise exception.InvalidInput(
            reason=f"the body names {sorted(body)}, not only the key {key!r} of the path"
        )
    specs = _text(body)
    api.compute.update_flavor_extra_specs(
        context, Flavor.get_by_flavor_id(context, flavor_id), specs
    )
    return specs


@validation.response_body_schema(None, status=200)
def delete_extra_spec(api, context, req, flavor_id, key):
    """Remove one extra spec."""
    Flavor.get_by_flavor_id(context, flavor_id).delete_extra_spec(key)


def _text(specs):
    """Values as Nova stores them: numbers and booleans as their text, which must fit
    the column as a string value must."""
    texts = {
        key: str(value).lower() if isinstance(value, bool) else str(value)
        for key, value in specs.items()
    }
    for key, text in texts.items():
        if len(text) > schemas.MAX_SPEC_VALUE:
            raise exception.InvalidInput(
                reason=f"extra spec {key}: a value of {len(text)} characters is over "
                f"{schemas.MAX_SPEC_VALUE}"
            )
    return texts

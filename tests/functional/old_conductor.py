"""A conductor not yet upgraded: it knows PciDeviceList 1.3 and ComputeNode 1.4 (and the
objects that carry them in those versions), nothing newer.

    python -m tests.functional.old_conductor --config-file F

The same ``main`` as ``pcisim-conductor``, with classes of those versions the only
ones of their objects in the registry, so that it answers a compute of this release as
a conductor of the release before would: it does not know the objects that compute
sends. Conductors are upgraded before computes; this is what the order protects.
"""

from pcisim import concurrency

concurrency.select_backend()  # selects the concurrency backend before anything else

# isort: split
from oslo_versionedobjects import base as ovo_base

from pcisim import objects
from pcisim.cmd import conductor

OLD_VERSIONS = {
    "PciDeviceList": "1.3",
    "Instance": "1.2",
    "InstanceList": "1.2",
    "ComputeNode": "1.4",
    "ComputeNodeList": "1.4",
}


def install_old_versions():
    """Make a class of each version of OLD_VERSIONS the only one of its object.

    NOTE: the classes are put in the registry directly rather than registered, as
    tests/functional/old_client.py does; each keeps the current class's fields, which
    these versions share with it.
    """
    objects.register_all()
    registry = ovo_base.VersionedObjectRegistry.obj_classes()
    for name, version in OLD_VERSIONS.items():
        (current,) = registry[name]
        registry[name] = [type(name, (current,), {"VERSION": version, "__module__": __name__})]


if __name__ == "__main__":
    install_old_versions()
    conductor.main()

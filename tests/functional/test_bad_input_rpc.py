"""Malformed messages sent straight to the conductor: a typed error, nothing written.

A raw oslo.messaging client (``rpc.get_client``, the serializer every process uses, but
no object layer in front of it) sends what no well-behaved process would. Each case
gets an exception the caller can catch by type, the conductor keeps serving, and no
row changes. ``test_conductor_refusals.py`` has the first cases (unknown objects,
methods and versions); this table extends them.

Payloads are sent as primitives, as they travel: an object is the dict of
``pcisim_object.*`` keys ``obj_to_primitive`` makes, or whatever garbage a case puts
in its place.
"""

import oslo_messaging as messaging
import pytest
from oslo_versionedobjects import exception as ovo_exception

from pcisim import exception, rpc
from pcisim.objects.compute_node import ComputeNodeList
from tests import object_factories
from tests.functional import api_server


def _primitive(device, **changes):
    """The primitive of ``device`` with ``changes`` to its keys (None deletes one)."""
    primitive = device.obj_to_primitive()
    primitive["pcisim_object.changes"] = ["status"]
    primitive["pcisim_object.data"] = {**primitive["pcisim_object.data"], "status": "allocated"}
    for key, value in changes.items():
        if value is None:
            primitive.pop(f"pcisim_object.{key}")
        else:
            primitive[f"pcisim_object.{key}"] = value
    return primitive


def _class_action(objname="PciDeviceList", objmethod="get_all", versions=None, **overrides):
    kwargs = {
        "objname": objname,
        "objmethod": objmethod,
        "object_versions": {} if versions is None else versions,
        "args": (),
        "kwargs": {},
        **overrides,
    }
    return "object_class_action_versions", lambda device: {
        k: v for k, v in kwargs.items() if v is not MISSING
    }


def _object_action(objmethod="save", objinst=None, **overrides):
    def kwargs(device):
        values = {
            "objinst": _primitive(device) if objinst is None else objinst(device),
            "objmethod": objmethod,
            "args": (),
            "kwargs": {},
            **overrides,
        }
        return {k: v for k, v in values.items() if v is not MISSING}

    return "object_action", kwargs


def _backport(objinst=None, versions=None):
    def kwargs(device):
        return {
            "objinst": _primitive(device) if objinst is None else objinst(device),
            "object_versions": {"PciDevice": "1.0"} if versions is None else versions,
        }

    return "object_backport_versions", kwargs


MISSING = object()
MALFORMED = exception.MalformedObjectCall
NOVA_PRIMITIVE = {
    "nova_object.name": "PciDevice",
    "nova_object.namespace": "nova",
    "nova_object.version": "1.0",
    "nova_object.data": {},
}

# (case, (RPC method, kwargs of the device under attack), exception the caller gets)
RPC_CASES = [
    # object_class_action_versions: the method, the object, the argument types
    ("private classmethod", _class_action(objmethod="_from_rows"), exception.NotRemotable),
    ("private name", _class_action(objmethod="_secret"), exception.NotRemotable),
    ("dunder", _class_action(objmethod="__init__"), exception.NotRemotable),
    ("inherited helper", _class_action(objmethod="obj_class_from_name"), exception.NotRemotable),
    (
        "instance method as a class action",
        _class_action(objname="PciDevice", objmethod="save"),
        exception.RemotableKindMismatch,
    ),
    (
        "destroy as a class action",
        _class_action(objname="ComputeNode", objmethod="destroy"),
        exception.RemotableKindMismatch,
    ),
    ("the base class", _class_action(objname="PcisimObject"), ovo_exception.UnsupportedObjectError),
    (
        "another namespace",
        _class_action(objname="nova.PciDevice"),
        ovo_exception.UnsupportedObjectError,
    ),
    ("objname a number", _class_action(objname=123), MALFORMED),
    ("objmethod null", _class_action(objmethod=None), MALFORMED),
    ("object_versions a string", _class_action(versions="1.0"), MALFORMED),
    ("object version not X.Y", _class_action(versions={"PciDeviceList": "banana"}), MALFORMED),
    ("object version a number", _class_action(versions={"PciDeviceList": 1.0}), MALFORMED),
    ("args a number", _class_action(args=5), MALFORMED),
    ("args a dict", _class_action(args={"a": 1}), MALFORMED),
    ("kwargs a list", _class_action(kwargs=[1]), MALFORMED),
    ("kwargs the method lacks", _class_action(kwargs={"bogus": 1}), TypeError),
    ("an argument missing", _class_action(objmethod=MISSING), TypeError),
    ("an argument too many", _class_action(evil=1), TypeError),
    # object_action: the object, the method
    ("objinst a plain dict", _object_action(objinst=lambda d: {"id": d.id}), MALFORMED),
    ("objinst a string", _object_action(objinst=lambda d: "PciDevice"), MALFORMED),
    ("objinst a list", _object_action(objinst=lambda d: [None]), MALFORMED),
    ("objinst of nova's keys", _object_action(objinst=lambda d: NOVA_PRIMITIVE), MALFORMED),
    (
        "objinst of another namespace",
        _object_action(objinst=lambda d: _primitive(d, namespace="nova")),
        ovo_exception.UnsupportedObjectError,
    ),
    ("the private writer", _object_action(objmethod="_update"), exception.NotRemotable),
    (
        "a public local method",
        _object_action(objmethod="allocate", args=("i-1",)),
        exception.NotRemotable,
    ),
    (
        "a non-remotable helper",
        _object_action(objmethod="obj_reset_changes"),
        exception.NotRemotable,
    ),
    (
        "a classmethod as an object action",
        _object_action(objmethod="get_by_dev_id", args=(1,)),
        exception.RemotableKindMismatch,
    ),
    ("args a string", _object_action(args="i-1"), MALFORMED),
    ("kwargs keys not strings", _object_action(kwargs=[("a", 1)]), MALFORMED),
    # garbage primitives: refused while being deserialized, before any method runs
    (
        "a field of the wrong type",
        _object_action(objinst=lambda d: _primitive(d, data={"id": "x"})),
        ValueError,
    ),
    ("no data", _object_action(objinst=lambda d: _primitive(d, data=None)), KeyError),
    (
        "a version that is no version",
        _object_action(objinst=lambda d: _primitive(d, version="x.y")),
        messaging.RemoteError,
    ),
    # object_backport_versions
    ("backport of a plain dict", _backport(objinst=lambda d: {"id": d.id}), MALFORMED),
    ("backport to no version", _backport(versions={}), MALFORMED),
    ("backport versions a string", _backport(versions="1.0"), MALFORMED),
]


@pytest.fixture
def device(conductor, ctxt):
    """A free VF on a node: the target of every malformed call."""
    return object_factories.vf(ctxt, object_factories.compute_node(ctxt))


@pytest.mark.parametrize(
    ("rpc_method", "kwargs", "raises"),
    [case[1] + (case[2],) for case in RPC_CASES],
    ids=[case[0] for case in RPC_CASES],
)
def test_a_malformed_message_gets_a_typed_error_and_writes_nothing(
    conductor, device, ctxt, rpc_method, kwargs, raises
):
    client = rpc.get_client(
        conductor.client_transport, messaging.Target(topic=conductor.topic, version="1.0")
    )
    before = api_server.database_rows()

    with pytest.raises(raises):
        client.call(ctxt, rpc_method, **kwargs(device))

    assert api_server.database_rows() == before
    assert len(ComputeNodeList.get_all(ctxt)) == 1  # and the conductor keeps serving

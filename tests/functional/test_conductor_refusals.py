"""The conductor refuses malformed object calls with specific errors and keeps serving."""

import oslo_messaging as messaging
import pytest
from oslo_versionedobjects import exception as ovo_exception

from pcisim import context as pcisim_context
from pcisim import exception, rpc
from pcisim.objects.compute_node import ComputeNodeList


@pytest.fixture
def raw_client(conductor):
    """An RPC client of the conductor that sends whatever a test asks it to."""

    def client(version="1.0"):
        target = messaging.Target(topic=conductor.topic, version=version)
        return rpc.get_client(conductor.client_transport, target)

    return client


def _class_action(client, objname="ComputeNodeList", objmethod="get_all", versions=None):
    return client.call(
        pcisim_context.get_admin_context(),
        "object_class_action_versions",
        objname=objname,
        objmethod=objmethod,
        object_versions=versions or {objname: "1.0"},
        args=(),
        kwargs={},
    )


def _still_serving(ctxt):
    assert list(ComputeNodeList.get_all(ctxt)) == []


def test_unknown_object_is_refused(raw_client, ctxt):
    with pytest.raises(ovo_exception.UnsupportedObjectError, match="Nope"):
        _class_action(raw_client(), objname="Nope", objmethod="get_all")
    _still_serving(ctxt)


def test_unknown_method_is_refused(raw_client, ctxt):
    with pytest.raises(exception.NotRemotable, match="ComputeNodeList.get_everything"):
        _class_action(raw_client(), objmethod="get_everything")
    _still_serving(ctxt)


@pytest.mark.parametrize("method", ["obj_from_primitive", "_from_db_object", "save_batch2"])
def test_method_that_is_not_remotable_is_refused(raw_client, ctxt, method):
    with pytest.raises(exception.NotRemotable, match=method):
        _class_action(raw_client(), objname="PciDeviceList", objmethod=method)
    _still_serving(ctxt)


def test_object_version_the_conductor_does_not_know_is_refused(raw_client, ctxt):
    with pytest.raises(ovo_exception.IncompatibleObjectVersion, match="2.0"):
        _class_action(raw_client(), versions={"ComputeNodeList": "2.0"})
    _still_serving(ctxt)


def test_rpc_api_version_the_conductor_does_not_speak_is_refused(raw_client, ctxt):
    with pytest.raises(messaging.RemoteError, match="UnsupportedVersion"):
        _class_action(raw_client(version="1.9"))
    _still_serving(ctxt)


def test_object_action_on_an_unknown_object_is_refused(raw_client, ctxt):
    primitive = {
        "pcisim_object.name": "Nope",
        "pcisim_object.namespace": "pcisim",
        "pcisim_object.version": "1.0",
        "pcisim_object.data": {},
    }
    with pytest.raises(ovo_exception.UnsupportedObjectError, match="Nope"):
        raw_client().call(
            ctxt, "object_action", objinst=primitive, objmethod="save", args=(), kwargs={}
        )
    _still_serving(ctxt)


def test_unknown_rpc_method_is_refused(raw_client, ctxt):
    with pytest.raises(messaging.RemoteError, match="NoSuchMethod"):
        raw_client().call(ctxt, "drop_all_tables")
    _still_serving(ctxt)

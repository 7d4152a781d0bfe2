"""Pools and the planning of PCI requests against them."""

import uuid

import pytest

from pcisim import exception
from pcisim.objects.fields import PciDeviceStatus as S
from pcisim.objects.instance_pci_requests import InstancePCIRequest
from pcisim.objects.pci_device import PciDevice
from pcisim.pci import capacity
from pcisim.pci.stats import PciDeviceStats

VF_SPEC = {"vendor_id": "8086", "product_id": "1520"}
PF_SPEC = {"vendor_id": "8086", "product_id": "1521", "dev_type": "type-PF"}
GPU_SPEC = {"vendor_id": "10de", "product_id": "1eb8"}


def _device(address, dev_type="type-VF", numa_node=0, parent=None, vendor="8086", product="1520"):
    return PciDevice(
        compute_node_id=1,
        address=address,
        vendor_id=vendor,
        product_id=product,
        dev_type=dev_type,
        status=S.AVAILABLE,
        label="l",
        numa_node=numa_node,
        parent_addr=parent,
        instance_uuid=None,
        request_id=None,
    )


def _sriov(stats, pf_count=2, vfs=4, numa_node=0):
    """PFs 0000:1N:00.0 with VFs 0000:1N:10.F, all in ``stats``; returns {pf: [vfs]}."""
    tree = {}
    for n in range(pf_count):
        pf = _device(f"0000:1{n}:00.0", "type-PF", numa_node, product="1521")
        tree[pf] = [
            _device(f"0000:1{n}:10.{f}", parent=pf.address, numa_node=numa_node) for f in range(vfs)
        ]
        for vf in tree[pf]:
            vf.link_parent(pf)
        for device in (pf, *tree[pf]):
            stats.update_device(device)
    return tree


def _request(spec, count=1, numa_policy=None):
    return InstancePCIRequest(
        count=count,
        spec=[spec],
        alias_name="a",
        request_id=str(uuid.uuid4()),
        numa_policy=numa_policy,
    )


def _pool_counts(stats):
    return sorted((p.dev_type, p.group, p.count) for p in stats.pools())


def test_vfs_are_pooled_per_parent_and_each_pf_alone():
    stats = PciDeviceStats()
    _sriov(stats)
    assert _pool_counts(stats) == [
        ("type-PF", "0000:10:00.0", 1),
        ("type-PF", "0000:11:00.0", 1),
        ("type-VF", "0000:10:00.0", 4),
        ("type-VF", "0000:11:00.0", 4),
    ]


def test_tags_from_the_device_spec_split_pools():
    stats = PciDeviceStats(tags_for=lambda d: {"physical_network": d.address[-1]})
    stats.update_device(_device("0000:0a:00.1"))
    stats.update_device(_device("0000:0a:00.2"))
    assert len(stats.pools()) == 2


def test_a_device_that_is_not_available_leaves_its_pool():
    stats = PciDeviceStats()
    device = _device("0000:0a:00.1")
    stats.update_device(device)
    device.status = S.CLAIMED
    stats.update_device(device)
    assert stats.pools() == []


def test_removing_a_pooled_device_empties_its_pool():
    stats = PciDeviceStats()
    device = _device("0000:0a:00.1")
    stats.update_device(device)
    stats.remove_device(device)
    assert stats.pools() == []


@pytest.mark.parametrize("status", [S.CLAIMED, S.ALLOCATED, S.UNAVAILABLE, None])
def test_removing_an_unpooled_device_from_the_pools_raises_pool_empty(status):
    stats = PciDeviceStats()
    device = _device("0000:0a:00.1")
    if status is not None:  # None: a device the pools never saw
        stats.update_device(device)
        device.status = status
        stats.update_device(device)
    with pytest.raises(exception.PciDevicePoolEmpty, match="0000:0a:00.1 is in no pool"):
        stats.remove_device(device)


def test_a_device_whose_numa_node_changed_moves_pool():
    stats = PciDeviceStats()
    device = _device("0000:0a:00.1", numa_node=0)
    stats.update_device(device)
    device.numa_node = 1
    stats.update_device(device)
    assert [p.numa_node for p in stats.pools()] == [1]


def test_support_requests_changes_nothing():
    stats = PciDeviceStats()
    _sriov(stats)
    before = _pool_counts(stats)
    assert stats.support_requests([_request(VF_SPEC, count=8)])
    assert not stats.support_requests([_request(VF_SPEC, count=9)])
    assert _pool_counts(stats) == before


def test_consume_claims_devices_and_takes_them_out_of_their_pools():
    stats = PciDeviceStats()
    tree = _sriov(stats)
    claimed = stats.consume_requests([_request(VF_SPEC, count=2)], "i-1")
    assert [d.status for d in claimed] == [S.CLAIMED] * 2
    assert {d.instance_uuid for d in claimed} == {"i-1"}
    assert len(stats) == 2 + 8 - 2 - 1  # and the VFs' PF is no longer free
    assert all(pf.status != S.AVAILABLE for pf in tree if pf.address == claimed[0].parent_addr)


def test_consume_of_requests_that_do_not_fit_raises_and_claims_nothing():
    stats = PciDeviceStats()
    tree = _sriov(stats)
    with pytest.raises(exception.PciDeviceRequestFailed):
        stats.consume_requests([_request(VF_SPEC, count=2), _request(GPU_SPEC)], "i-1")
    assert all(d.status == S.AVAILABLE for pf, vfs in tree.items() for d in (pf, *vfs))


def test_pf_pools_serve_only_requests_for_type_pf():
    stats = PciDeviceStats()
    _sriov(stats, pf_count=1, vfs=0)
    assert not stats.support_requests([_request({"vendor_id": "8086", "product_id": "1521"})])
    assert stats.support_requests([_request(PF_SPEC)])


def test_claiming_a_pf_takes_its_vfs_out_of_the_pools():
    stats = PciDeviceStats()
    _sriov(stats, pf_count=1, vfs=4)
    stats.consume_requests([_request(PF_SPEC)], "i-1")
    assert stats.pools() == []


def test_one_plan_never_takes_a_pf_and_one_of_its_vfs():
    stats = PciDeviceStats()
    _sriov(stats, pf_count=1, vfs=4)
    assert not stats.support_requests([_request(PF_SPEC), _request(VF_SPEC)])


def test_two_requests_take_two_vfs_of_one_pf():
    stats = PciDeviceStats()
    _sriov(stats, pf_count=1, vfs=2)
    claimed = stats.consume_requests([_request(VF_SPEC), _request(VF_SPEC)], "i-1")
    assert len({d.address for d in claimed}) == 2
    assert {d.parent_addr for d in claimed} == {"0000:10:00.0"}


def test_one_plan_takes_a_pf_and_a_vf_of_another_pf():
    stats = PciDeviceStats()
    tree = _sriov(stats, pf_count=2, vfs=1)
    claimed = stats.consume_requests([_request(PF_SPEC), _request(VF_SPEC)], "i-1")
    pf, vf = claimed
    assert vf.parent_addr != pf.address
    assert {d.status for pf_, vfs in tree.items() for d in (pf_, *vfs)} == {
        S.CLAIMED,
        S.UNCLAIMABLE,
    }


def test_a_multi_device_request_can_span_pools():
    stats = PciDeviceStats()
    _sriov(stats, pf_count=2, vfs=2)
    claimed = stats.consume_requests([_request(VF_SPEC, count=3)], "i-1")
    assert len({d.parent_addr for d in claimed}) == 2


def _vf_pool_of(pf):
    """The resource name an allocation gives the VF pool of ``pf`` (no tags here)."""
    vf = _device("0000:00:00.1", parent=pf.address, numa_node=pf.numa_node)
    return capacity.resource_name(capacity.PoolKey.of(vf, {}))


def test_consume_with_an_allocation_takes_devices_only_from_the_pools_it_names():
    stats = PciDeviceStats()
    first, second = _sriov(stats, pf_count=2, vfs=2)
    allocation = {_vf_pool_of(second): 1}
    (claimed,) = stats.consume_requests([_request(VF_SPEC)], "i-1", allocation=allocation)
    assert claimed.parent_addr == second.address


def test_consume_with_an_allocation_takes_no_more_of_a_pool_than_it_allows():
    stats = PciDeviceStats()
    first, _ = _sriov(stats, pf_count=2, vfs=2)
    allocation = {_vf_pool_of(first): 1}
    with pytest.raises(exception.PciDeviceRequestFailed):
        stats.consume_requests([_request(VF_SPEC, count=2)], "i-1", allocation=allocation)
    assert len(stats) == 2 + 2 * 2


def test_published_pools_support_the_same_requests():
    stats = PciDeviceStats()
    _sriov(stats)
    published = PciDeviceStats.from_device_pools(stats.to_device_pools_obj())
    assert published.support_requests([_request(VF_SPEC, count=8)])
    assert not published.support_requests([_request(VF_SPEC, count=9)])


def test_published_pools_sum_vfs_of_every_parent():
    stats = PciDeviceStats()
    _sriov(stats)
    counts = {(p.dev_type, p.count) for p in stats.to_device_pools_obj()}
    assert counts == {("type-PF", 2), ("type-VF", 8)}


def test_published_pools_are_the_same_object_until_a_count_changes():
    stats = PciDeviceStats()
    tree = _sriov(stats)
    published = stats.to_device_pools_obj()
    assert stats.to_device_pools_obj() is published
    stats.remove_device(tree[next(iter(tree))][0])
    changed = stats.to_device_pools_obj()
    assert changed is not published
    assert {(p.dev_type, p.count) for p in changed} == {("type-PF", 2), ("type-VF", 7)}


# Nova's outcomes for a guest on NUMA node 1, device on node None / 0 / 1.
NUMA_OUTCOMES = {
    "preferred": (True, True, True),
    "legacy": (True, False, True),
    None: (True, False, True),
    "required": (False, False, True),
    "socket": (False, False, True),
}


@pytest.mark.parametrize("policy", sorted(NUMA_OUTCOMES, key=str))
@pytest.mark.parametrize("device_node_index", [0, 1, 2])
def test_numa_policy_outcomes_for_a_guest_on_node_1(policy, device_node_index):
    device_node = (None, 0, 1)[device_node_index]
    stats = PciDeviceStats()
    stats.update_device(_device("0000:0a:00.1", "type-PCI", numa_node=device_node))
    fits = stats.support_requests([_request(VF_SPEC, numa_policy=policy)], numa_cells={1})
    assert fits == NUMA_OUTCOMES[policy][device_node_index]


def test_socket_policy_accepts_another_node_of_the_same_socket():
    stats = PciDeviceStats(numa_sockets={0: 0, 1: 0, 2: 1})
    stats.update_device(_device("0000:0a:00.1", "type-PCI", numa_node=0))
    assert stats.support_requests([_request(VF_SPEC, numa_policy="socket")], numa_cells={1})
    assert not stats.support_requests([_request(VF_SPEC, numa_policy="socket")], numa_cells={2})


def test_preferred_policy_takes_the_guests_node_first():
    stats = PciDeviceStats()
    stats.update_device(_device("0000:0a:00.1", "type-PCI", numa_node=0))
    stats.update_device(_device("0000:0b:00.1", "type-PCI", numa_node=1))
    (device,) = stats.consume_requests(
        [_request(VF_SPEC, numa_policy="preferred")], "i-1", numa_cells={1}
    )
    assert device.numa_node == 1


# Nova's consume cases: one device each on NUMA node 0, node 1 and no node, reported
# in every order; (guest nodes, policy, count) -> the nodes of the devices taken.
NOVA_NUMA_CASES = [
    ({0}, "required", 1, [0]),
    ({999}, "required", 1, None),
    ({0}, "legacy", 1, [0]),
    ({999}, "legacy", 1, [None]),
    ({0}, "legacy", 2, [0, None]),
    ({0}, "legacy", 3, None),
    ({0}, "preferred", 1, [0]),
    ({999}, "preferred", 1, [None]),
    ({0}, "preferred", 2, [0, None]),
    ({0}, "preferred", 3, [0, 1, None]),
    ({0}, "socket", 1, [0]),
]
REPORT_ORDERS = [(None, 0, 1), (1, None, 0), (None, 1, 0)]


def _one_device_a_node(order, numa_sockets=None):
    stats = PciDeviceStats(numa_sockets=numa_sockets)
    for index, node in enumerate(order):
        stats.update_device(_device(f"0000:0{index}:00.0", "type-PCI", numa_node=node))
    return stats


def _nodes_taken(stats, numa_cells, policy, count):
    request = _request(VF_SPEC, count=count, numa_policy=policy)
    try:
        devices = stats.consume_requests([request], "i-1", numa_cells=numa_cells)
    except exception.PciDeviceRequestFailed:
        return None
    return sorted((d.numa_node for d in devices), key=str)


@pytest.mark.parametrize("order", REPORT_ORDERS)
@pytest.mark.parametrize("cells, policy, count, nodes", NOVA_NUMA_CASES)
def test_each_policy_takes_the_devices_nova_takes_in_any_report_order(
    order, cells, policy, count, nodes
):
    expected = None if nodes is None else sorted(nodes, key=str)
    assert _nodes_taken(_one_device_a_node(order), cells, policy, count) == expected


@pytest.mark.parametrize("order", REPORT_ORDERS)
def test_preferred_ranks_a_device_without_numa_node_with_the_guests_nodes(order):
    # NOTE: a guest on [0] asking for 2 gets node 0 and no node, not node 0 and node 1
    assert _nodes_taken(_one_device_a_node(order), {0}, "preferred", 2) == [0, None]


@pytest.mark.parametrize("order", REPORT_ORDERS)
@pytest.mark.parametrize("policy", ["legacy", "preferred"])
def test_legacy_and_preferred_take_the_guests_own_node_before_no_node(order, policy):
    assert _nodes_taken(_one_device_a_node(order), {0}, policy, 1) == [0]


@pytest.mark.parametrize("order", [(1, 0), (0, 1)])
def test_socket_takes_the_guests_own_node_before_another_node_of_its_socket(order):
    stats = _one_device_a_node(order, numa_sockets={0: 0, 1: 0})
    assert _nodes_taken(stats, {0}, "socket", 1) == [0]
    assert _nodes_taken(stats, {0}, "socket", 1) == [1]


def test_socket_refuses_a_device_without_numa_node_or_on_another_socket():
    stats = _one_device_a_node((None, 1), numa_sockets={0: 0, 1: 1})
    assert _nodes_taken(stats, {0}, "socket", 1) is None


def test_a_guest_without_numa_topology_may_use_any_node():
    stats = PciDeviceStats()
    stats.update_device(_device("0000:0a:00.1", "type-PCI", numa_node=0))
    assert stats.support_requests([_request(VF_SPEC, numa_policy="required")])


def test_a_request_with_several_specs_takes_any_of_them():
    stats = PciDeviceStats()
    stats.update_device(_device("0000:0a:00.1", "type-PCI", vendor="10de", product="1eb8"))
    request = InstancePCIRequest(count=1, spec=[VF_SPEC, GPU_SPEC], request_id=str(uuid.uuid4()))
    assert stats.support_requests([request])

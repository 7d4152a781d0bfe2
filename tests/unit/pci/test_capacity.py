"""The shared PF/VF counters: what a node's inventory lets the scheduler allocate.

``draws`` and ``counters_left`` are the arithmetic; ``PciDeviceStats.from_capacity``
and ``allocation_for`` are what the scheduler plans with, so the exclusivity rules
are asserted there too.
"""

import uuid

from pcisim.objects.instance_pci_requests import InstancePCIRequest
from pcisim.objects.pci_device_pool import PciDevicePool
from pcisim.pci import capacity
from pcisim.pci.stats import PciDeviceStats

PF_A, PF_B = "0000:10:00.0", "0000:11:00.0"
VF_SPEC = {"vendor_id": "8086", "product_id": "1520"}
PF_SPEC = {"vendor_id": "8086", "product_id": "1521", "dev_type": "type-PF"}
GPU_SPEC = {"vendor_id": "10de", "product_id": "1eb8"}


def _pool(dev_type, count, group=None, product=None, vendor="8086", numa_node=0):
    product = product or {"type-PF": "1521", "type-VF": "1520"}.get(dev_type, "1eb8")
    return PciDevicePool(
        vendor_id=vendor,
        product_id=product,
        numa_node=numa_node,
        dev_type=dev_type,
        tags={},
        count=count,
        group=group,
    )


def _nic(pf=PF_A, vfs=4):
    """A PF and its ``vfs`` VFs, as two inventory pools: (pf pool, vf pool)."""
    return _pool("type-PF", 1, group=pf), _pool("type-VF", vfs, group=pf)


def _gpus(count):
    return _pool("type-PCI", count, vendor="10de")


def _name(pool):
    return capacity.resource_name(pool)


def _request(spec, count=1):
    return InstancePCIRequest(
        count=count, spec=[spec], alias_name="a", request_id=str(uuid.uuid4()), numa_policy=None
    )


def _allocation(inventory, used, *requests):
    stats = PciDeviceStats.from_capacity(inventory, used)
    return stats.allocation_for(list(requests))


# ------------------------------------------------------------------ draws


def test_a_pf_and_its_vfs_draw_on_one_counter_as_big_as_its_vfs():
    pf, vf = _nic(vfs=4)

    by_name, capacity_of = capacity.draws([pf, vf])

    assert by_name[_name(pf)].counter == by_name[_name(vf)].counter
    assert capacity_of == {by_name[_name(pf)].counter: 4}


def test_a_pf_costs_the_whole_counter_and_a_vf_one():
    pf, vf = _nic(vfs=4)

    by_name, _ = capacity.draws([pf, vf])

    assert (by_name[_name(pf)].cost, by_name[_name(vf)].cost) == (4, 1)


def test_a_pf_without_vfs_has_a_counter_of_one():
    pf = _pool("type-PF", 1, group=PF_A)

    by_name, capacity_of = capacity.draws([pf])

    assert by_name[_name(pf)].cost == 1
    assert capacity_of == {by_name[_name(pf)].counter: 1}


def test_vfs_of_one_pf_on_two_numa_nodes_share_one_counter_of_their_sum():
    pf = _pool("type-PF", 1, group=PF_A)
    near, far = _pool("type-VF", 2, group=PF_A), _pool("type-VF", 3, group=PF_A, numa_node=1)

    by_name, capacity_of = capacity.draws([pf, near, far])

    counters = {by_name[_name(p)].counter for p in (pf, near, far)}
    assert len(counters) == 1
    assert capacity_of == {counters.pop(): 5}
    assert by_name[_name(pf)].cost == 5


def test_two_pfs_have_two_counters():
    pools = [*_nic(PF_A), *_nic(PF_B)]

    by_name, capacity_of = capacity.draws(pools)

    assert len(capacity_of) == 2
    assert by_name[_name(pools[0])].counter != by_name[_name(pools[2])].counter


def test_a_pool_without_a_group_has_a_counter_of_its_own_of_its_total():
    gpu = _gpus(3)

    by_name, capacity_of = capacity.draws([gpu])

    assert by_name[_name(gpu)] == capacity.Draw(_name(gpu), 1)
    assert capacity_of == {_name(gpu): 3}


# ---------------------------------------------------------- counters_left


def test_counters_left_subtract_each_allocation_times_its_cost():
    pf, vf = _nic(vfs=4)
    by_name, capacity_of = capacity.draws([pf, vf])
    (counter,) = capacity_of

    assert capacity.counters_left(by_name, capacity_of, {_name(vf): 3}) == {counter: 1}
    assert capacity.counters_left(by_name, capacity_of, {_name(pf): 1}) == {counter: 0}


def test_counters_left_ignore_resources_that_are_not_pci_pools_of_the_inventory():
    gpu = _gpus(2)
    by_name, capacity_of = capacity.draws([gpu])

    left = capacity.counters_left(by_name, capacity_of, {"VCPU": 8, "PCI:elsewhere": 1})

    assert left == {_name(gpu): 2}


def test_counters_left_do_not_change_the_capacity_given():
    by_name, capacity_of = capacity.draws([_gpus(2)])
    before = dict(capacity_of)

    capacity.counters_left(by_name, capacity_of, {_name(_gpus(2)): 2})

    assert capacity_of == before


# ------------------------------------------------- what the scheduler plans


def test_a_pf_is_allocated_when_all_of_its_vfs_are_free():
    pf, vf = _nic(vfs=4)

    assert _allocation([pf, vf], {}, _request(PF_SPEC)) == {_name(pf): 1}


def test_a_pf_is_not_allocated_while_one_of_its_vfs_is():
    pf, vf = _nic(vfs=4)

    assert _allocation([pf, vf], {_name(vf): 1}, _request(PF_SPEC)) is None


def test_a_vf_is_not_allocated_while_its_pf_is():
    pf, vf = _nic(vfs=4)

    assert _allocation([pf, vf], {_name(pf): 1}, _request(VF_SPEC)) is None


def test_two_vfs_of_one_pf_fit_together():
    pf, vf = _nic(vfs=2)

    assert _allocation([pf, vf], {}, _request(VF_SPEC), _request(VF_SPEC)) == {_name(vf): 2}


def test_no_more_vfs_are_allocated_than_the_pf_has():
    pf, vf = _nic(vfs=2)

    assert _allocation([pf, vf], {_name(vf): 1}, _request(VF_SPEC, count=2)) is None


def test_one_plan_never_takes_a_pf_and_one_of_its_vfs():
    pf, vf = _nic(vfs=4)

    assert _allocation([pf, vf], {}, _request(PF_SPEC), _request(VF_SPEC)) is None


def test_a_vf_of_another_pf_fits_beside_an_allocated_pf():
    pf_a, vf_a = _nic(PF_A)
    pf_b, vf_b = _nic(PF_B)

    allocation = _allocation([pf_a, vf_a, pf_b, vf_b], {_name(pf_a): 1}, _request(VF_SPEC))

    assert allocation == {_name(vf_b): 1}


def test_another_pf_is_allocated_while_a_vf_of_the_first_is():
    pf_a, vf_a = _nic(PF_A)
    pf_b, vf_b = _nic(PF_B)

    allocation = _allocation([pf_a, vf_a, pf_b, vf_b], {_name(vf_a): 1}, _request(PF_SPEC))

    assert allocation == {_name(pf_b): 1}


def test_gpus_are_allocated_up_to_their_total_and_no_further():
    gpu = _gpus(2)

    assert _allocation([gpu], {_name(gpu): 1}, _request(GPU_SPEC)) == {_name(gpu): 1}
    assert _allocation([gpu], {_name(gpu): 2}, _request(GPU_SPEC)) is None

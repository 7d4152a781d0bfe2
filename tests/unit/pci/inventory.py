"""Hypervisor reports for tests and benchmarks: SR-IOV NICs as the tracker sees them."""

VENDOR, PF_PRODUCT, VF_PRODUCT = "8086", "1521", "1520"
DEVICE_SPEC = '{"vendor_id": "8086", "physical_network": "physnet1"}'


def pf_address(i):
    return f"0000:{0x10 + i:02x}:00.0"


def vf_address(i, j):
    return f"0000:{0x10 + i:02x}:{0x10 + j // 8:02x}.{j % 8}"


def sriov_report(pfs, vfs_per_pf):
    """PF i at 0000:BB:00.0 (BB = 0x10+i) with VF j at 0000:BB:SS.F; numa_node i % 2."""
    report = []
    for i in range(pfs):
        report.append(
            {
                "address": pf_address(i),
                "vendor_id": VENDOR,
                "product_id": PF_PRODUCT,
                "dev_type": "type-PF",
                "numa_node": i % 2,
            }
        )
        report += [
            {
                "address": vf_address(i, j),
                "vendor_id": VENDOR,
                "product_id": VF_PRODUCT,
                "dev_type": "type-VF",
                "parent_addr": pf_address(i),
                "numa_node": i % 2,
            }
            for j in range(vfs_per_pf)
        ]
    return report

"""The compute service: a hypervisor's PCI devices tracked, claimed and freed for its instances."""

# The compute service's binary, as its program and its Service records are named.
BINARY = "pcisim-compute"

"""pcisim's versioned objects: the contract between its processes.

``register_all()`` imports every object module, which registers its classes.
"""


def register_all():
    __import__("pcisim.objects.compute_node")
    __import__("pcisim.objects.flavor")
    __import__("pcisim.objects.instance")
    __import__("pcisim.objects.instance_fault")
    __import__("pcisim.objects.instance_pci_requests")
    __import__("pcisim.objects.pci_device")
    __import__("pcisim.objects.pci_device_pool")
    __import__("pcisim.objects.service")

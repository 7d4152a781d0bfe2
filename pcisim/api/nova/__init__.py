"""Nova's compute API (v2.1 with microversions), with minimal image and identity faces:
a second face over the same compute API and objects as pcisim's own routes, so that
openstacksdk, the ``openstack`` CLI and novaclient drive pcisim unmodified.

It has no logic of its own: handlers read objects, act through ``compute.api`` and
render Nova's views; errors are Nova's fault bodies (``faults``).
"""

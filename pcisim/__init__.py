"""pcisim: a miniature compute control plane built around a PCI device tracker.

Importing this package has no side effect: the concurrency backend is selected by each
command's ``main()`` (see :mod:`pcisim.concurrency`), so that a process importing
pcisim, such as a pytest session with pcisim's plugin, still chooses its own.
"""

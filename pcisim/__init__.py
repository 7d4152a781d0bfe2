"""pcisim: a miniature compute control plane built around a PCI device tracker.

Importing this package selects the concurrency backend before anything can import
oslo.messaging (which fixes the choice on first use); see :mod:`pcisim.concurrency`.
"""

import warnings

# futurist imports eventlet whether or not it is used, and eventlet warns on import.
# In the default threading mode that warning tells an operator nothing actionable.
warnings.filterwarnings("ignore", message=r"(?s).*Eventlet is deprecated")

from pcisim import concurrency  # noqa: E402

concurrency.select_backend()

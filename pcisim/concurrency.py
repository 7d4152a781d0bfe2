"""Choose how pcisim's services run concurrently: native threads or eventlet.

pcisim runs on oslo.service's threading backend and oslo.messaging's default
(threading) executor. The classic model, in which every process is monkey-patched by
eventlet as OpenStack services long were, remains selectable for people who want to
study it: set ``PCISIM_CONCURRENCY=eventlet`` in the environment.

The choice is an environment variable rather than a configuration option because it
must be made before any other import: oslo.service fixes its backend the first time
anything (importing oslo.messaging, for one) asks for it, and eventlet must patch the
standard library before threads or sockets are created. So importing pcisim selects
nothing: each service command calls ``select_backend()`` as the first action of its
``main()``, and so do the test suite and the ``control_plane`` fixture.
"""

import os
import warnings

ENV_VAR = "PCISIM_CONCURRENCY"
THREADING = "threading"
EVENTLET = "eventlet"


class InvalidConcurrencyMode(ValueError):
    def __init__(self, value):
        super().__init__(
            f"{ENV_VAR}={value!r} is not a concurrency mode; "
            f"choose {THREADING!r} (the default) or {EVENTLET!r}"
        )


def selected_mode():
    """Return the mode asked for by the environment, validated."""
    mode = os.environ.get(ENV_VAR, "").strip().lower() or THREADING
    if mode not in (THREADING, EVENTLET):
        raise InvalidConcurrencyMode(os.environ[ENV_VAR])
    return mode


def select_backend():
    """Select oslo.service's backend (and monkey-patch for eventlet) exactly once."""
    # NOTE: imported here, not at the top, so that importing this module (as the HTTP
    # client's commands do) loads nothing of oslo.service.
    from oslo_service import backend

    if backend.get_backend_type() is not None:
        return
    _silence_import_warnings()
    if selected_mode() == EVENTLET:
        import eventlet

        eventlet.monkey_patch()
        backend.init_backend(backend.BackendType.EVENTLET)
    else:
        backend.init_backend(backend.BackendType.THREADING)


def _silence_import_warnings():
    # NOTE: futurist imports eventlet whether or not it is used, and eventlet warns on
    # import; in the default threading mode that warning tells an operator nothing.
    warnings.filterwarnings("ignore", message=r"(?s).*Eventlet is deprecated")
    # NOTE: eventlet imports dnspython, whose DNSSEC module names DSA keys, and
    # cryptography >= 51 warns when anything names them; pcisim signs nothing.
    warnings.filterwarnings("ignore", message="DSA is deprecated", module=r"dns\.")

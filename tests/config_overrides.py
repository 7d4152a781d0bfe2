"""Options set for a while in tests, and always set back.

NOTE: oslo_config.fixture.Config would do this, but its clean-up resets the whole
ConfigOpts (the parsed files too), under control planes that outlive one test.
"""

import contextlib


@contextlib.contextmanager
def overridden(conf, values):
    """``values`` ({(name, group): value}, group None for DEFAULT) set while the block runs."""
    try:
        for (name, group), value in values.items():
            conf.set_override(name, value, group=group)
        yield conf
    finally:
        for name, group in values:
            conf.clear_override(name, group=group)

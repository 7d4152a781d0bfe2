"""Waiting for a condition, with a deadline: the one polling loop of the CLI's
``--wait`` and the test fixture."""

import time


def wait_until(predicate, timeout=30.0, what="the condition", interval=0.01):
    """Poll ``predicate`` every ``interval`` seconds until it returns something true,
    and return that; raise ``TimeoutError`` naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (result := predicate()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)
    return result

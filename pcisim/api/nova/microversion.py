"""The microversion a request asks for, read as Nova reads it.

``OpenStack-API-Version: compute X.Y`` first, then the legacy
``X-OpenStack-Nova-API-Version: X.Y``; none means the minimum, ``latest`` the maximum.
"""

import microversion_parse

from pcisim import exception

SERVICE_TYPE = "compute"
LEGACY_HEADER = "X-OpenStack-Nova-API-Version"
STANDARD_HEADER = "OpenStack-API-Version"
MIN_VERSION = microversion_parse.Version(2, 1)
MAX_VERSION = microversion_parse.Version(2, 88)


def requested(headers):
    """The ``microversion_parse.Version`` ``headers`` ask for.

    Raises ``InvalidAPIVersionString`` (400) for a value that is not ``X.Y`` and
    ``InvalidGlobalAPIVersion`` (406) for one outside MIN_VERSION..MAX_VERSION.
    """
    text = microversion_parse.get_version(headers, SERVICE_TYPE, legacy_headers=[LEGACY_HEADER])
    if text is None:
        return MIN_VERSION
    if text.strip().lower() == "latest":
        return MAX_VERSION
    try:
        version = microversion_parse.parse_version_string(text)
    except TypeError:
        raise exception.InvalidAPIVersionString(version=text) from None
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise exception.InvalidGlobalAPIVersion(
            req_ver=text, min_ver=str(MIN_VERSION), max_ver=str(MAX_VERSION)
        )
    return version


def response_headers(version):
    """The headers every answer of the compute face carries: the version it used."""
    return {
        STANDARD_HEADER: f"{SERVICE_TYPE} {version}",
        LEGACY_HEADER: str(version),
        "Vary": f"{STANDARD_HEADER}, {LEGACY_HEADER}",
    }


def at_least(version, text):
    """Whether ``version`` is ``text`` (``"2.47"``) or newer."""
    return version >= microversion_parse.parse_version_string(text)

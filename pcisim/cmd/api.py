"""pcisim-api: the HTTP API, a process without the database.

    pcisim-api [--config-file F] [--trace]

Listens on ``[api] listen``:``[api] port``; names PCI requests with ``[pci] alias``.
Refuses to listen on an address other than a loopback one without ``[api] auth_token``,
which every request must then carry in ``X-Auth-Token``. Every read and write goes to
the conductor over RPC. SIGTERM and SIGINT stop it.
"""

import sys

from oslo_config import cfg

from pcisim import cmd, dbaccess, exception

# NOTE: every module that imports oslo.messaging (or oslo.service) is imported inside
# the functions, once main() has selected the concurrency backend.

BINARY = "pcisim-api"
CONF = cfg.CONF


def build_service():
    """The API service of this process, which acts through the conductor only."""
    from pcisim import rpc, wsgi
    from pcisim.api import app as api_app
    from pcisim.compute import api as compute_api
    from pcisim.conductor import rpcapi as conductor_rpcapi
    from pcisim.objects import base as objects_base
    from pcisim.pci import request

    try:
        aliases = request.parse_aliases(CONF.pci.alias)
        wsgi.check_listen(CONF.api.listen, CONF.api.auth_token)
    except exception.Invalid as error:
        sys.exit(f"{BINARY}: {error}")
    cmd.check_transport_url(BINARY)
    transport = rpc.get_transport()
    objects_base.set_indirection_api(conductor_rpcapi.ConductorAPI(transport))
    dbaccess.forbid(BINARY)
    api = api_app.Api(compute=compute_api.API(transport, aliases))
    try:
        app = api_app.create_app(api, auth_token=CONF.api.auth_token, users=CONF.api.users)
    except exception.Invalid as error:
        sys.exit(f"{BINARY}: {error}")
    try:
        return wsgi.WSGIService(app, CONF.api.listen, CONF.api.port)
    except OSError as error:
        sys.exit(f"{BINARY}: {error.strerror}")


def main(argv=None):
    cmd.select_backend(BINARY)
    from pcisim import service as pcisim_service

    cmd.prepare_service(BINARY, argv)
    pcisim_service.serve([build_service()])

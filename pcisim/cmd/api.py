"""pcisim-api: the HTTP API, a process without the database.

    pcisim-api [--config-file F] [--trace]

Listens on ``[api] listen``:``[api] port``; names PCI requests with ``[pci] alias``.
Every read and write goes to the conductor over RPC. SIGTERM and SIGINT stop it.
"""

import sys

from compute import api as compute_api
from conductor import rpcapi as conductor_rpcapi
from objects import base as objects_base
from pci import request
from pcisim import cmd, dbaccess, exception, rpc, wsgi
from pcisim import conf as pcisim_conf
from pcisim import service as pcisim_service
from pcisim.api import app as api_app

BINARY = "pcisim-api"
CONF = pcisim_conf.CONF


def build_service():
    """The API service of this process, which acts through the conductor only."""
    try:
        aliases = request.parse_aliases(CONF.pci.alias)
    except exception.Invalid as error:
        sys.exit(f"{BINARY}: {error}")
    transport = rpc.get_transport()
    objects_base.set_indirection_api(conductor_rpcapi.ConductorAPI(transport))
    dbaccess.forbid(BINARY)
    app = api_app.create_app(api_app.Api(compute=compute_api.API(transport, aliases)))
    return wsgi.WSGIService(app, CONF.api.listen, CONF.api.port)


def main(argv=None):
    cmd.prepare_service(BINARY, argv)
    pcisim_service.serve([build_service()])

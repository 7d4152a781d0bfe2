"""The minimal Keystone v3 face: version documents, tokens for configured users when
the API asks for a token (any credentials otherwise), and a catalog of this API's
endpoints that openstacksdk and the openstack CLI follow with a password."""

import openstack
import pytest

from pcisim import exception
from pcisim.api import app as api_app
from pcisim.api.nova import identity
from tests.functional import nova_cloud

pytestmark = [
    pytest.mark.filterwarnings("ignore::openstack.warnings.OpenStackDeprecationWarning"),
    pytest.mark.filterwarnings("ignore::openstack.warnings.RemovedInSDK50Warning"),
    pytest.mark.filterwarnings("ignore::openstack.warnings.RemovedInSDK60Warning"),
]
TOKEN = "s3cret-t0ken"
USERS = ["alice:wonderland"]
TOKENS = "/identity/v3/auth/tokens"


def _password(name, password):
    user = {"name": name, "domain": {"name": "Default"}, "password": password}
    return {"auth": {"identity": {"methods": ["password"], "password": {"user": user}}}}


@pytest.fixture
def guarded():
    app = api_app.create_app(api_app.Api(compute=None), auth_token=TOKEN, users=USERS)
    return app.test_client()


def test_the_identity_versions_are_answered_without_a_token(guarded):
    assert guarded.get("/identity").json["versions"]["values"][0]["id"] == "v3.14"
    version = guarded.get("/identity/v3").json["version"]
    assert version["links"][0]["href"] == "http://localhost/identity/v3/"


def test_a_configured_user_gets_the_api_token_and_a_catalog_of_this_api(guarded):
    response = guarded.post(TOKENS, json=_password("alice", "wonderland"))

    assert response.status_code == 201 and response.headers["X-Subject-Token"] == TOKEN
    catalog = {s["type"]: s["endpoints"][0]["url"] for s in response.json["token"]["catalog"]}
    assert catalog == {
        "compute": "http://localhost/v2.1",
        "image": "http://localhost/image",
        "identity": "http://localhost/identity/v3",
    }


@pytest.mark.parametrize(
    "body",
    [
        _password("alice", "looking-glass"),
        _password("bob", "wonderland"),
        {"auth": {"identity": {"methods": ["token"], "token": {"id": "not-it"}}}},
    ],
)
def test_wrong_credentials_are_a_401_in_keystones_format(guarded, body):
    response = guarded.post(TOKENS, json=body)
    assert response.status_code == 401 and "X-Subject-Token" not in response.headers
    assert response.json["error"]["code"] == 401
    assert response.json["error"]["title"] == "Unauthorized"


def test_the_token_itself_is_accepted_for_a_token(guarded):
    body = {"auth": {"identity": {"methods": ["token"], "token": {"id": TOKEN}}}}
    assert guarded.post(TOKENS, json=body).headers["X-Subject-Token"] == TOKEN


def test_without_a_token_configured_any_credentials_get_one():
    client = api_app.create_app(api_app.Api(compute=None)).test_client()
    response = client.post(TOKENS, json=_password("anyone", "anything"))
    assert response.status_code == 201 and response.headers["X-Subject-Token"]


def test_a_user_entry_without_its_password_is_refused_without_showing_it():
    with pytest.raises(exception.InvalidConfigValue, match="entry 2") as raised:
        identity.Issuer.from_config(TOKEN, ["alice:wonderland", "bob"])
    assert "wonderland" not in str(raised.value)


@pytest.fixture(scope="module")
def cloud(tmp_path_factory):
    with nova_cloud.cloud(tmp_path_factory, auth_token=TOKEN, users=USERS) as running:
        yield running


def test_openstacksdk_authenticates_with_a_password_and_follows_the_catalog(cloud):
    _, url = cloud
    connection = openstack.connect(
        auth_url=f"{url}/identity/v3",
        username="alice",
        password="wonderland",
        project_name="admin",
        user_domain_name="Default",
        project_domain_name="Default",
    )
    try:
        assert "gpu.small" in [flavor.name for flavor in connection.compute.flavors()]
        assert [h.name for h in connection.compute.hypervisors()] == ["node1"]
    finally:
        connection.close()


def test_the_cli_with_a_wrong_password_or_token_is_refused(cloud, tmp_path):
    _, url = cloud
    password = (
        "--os-auth-type",
        "password",
        "--os-auth-url",
        f"{url}/identity/v3",
        "--os-username",
        "alice",
        "--os-password",
        "nope",
        "--os-project-name",
        "admin",
        "--os-user-domain-name",
        "Default",
        "--os-project-domain-name",
        "Default",
    )
    refused = nova_cloud.openstack(url, tmp_path, "flavor", "list", auth=password)
    assert refused.returncode != 0 and "401" in refused.stderr

    token = ("--os-auth-type", "admin_token", "--os-token", "not-the-token")
    wrong = nova_cloud.openstack(url, tmp_path, "flavor", "list", auth=token)
    assert wrong.returncode != 0 and "401" in wrong.stderr
    right = ("--os-auth-type", "admin_token", "--os-token", TOKEN)
    assert nova_cloud.openstack(url, tmp_path, "flavor", "list", auth=right).returncode == 0

"""A small client of pcisim's HTTP API, used by the ``pcisim`` command line."""

import json
import urllib.error
import urllib.parse
import urllib.request

DEFAULT_URL = "http://127.0.0.1:8774"
AUTH_HEADER = "X-Auth-Token"


class ApiError(Exception):
    """The API answered with an error body."""

    def __init__(self, status, code, message):
        super().__init__(f"{message} ({code}, HTTP {status})")
        self.status, self.code, self.message = status, code, message


class Unreachable(Exception):
    def __init__(self, url, reason):
        super().__init__(f"cannot reach the pcisim API at {url}: {reason}")


class Client:
    """Requests to the API at ``url``, each carrying ``token`` (``X-Auth-Token``) when
    one is given."""

    def __init__(self, url=DEFAULT_URL, timeout=30.0, token=None):
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._token = token

    def __repr__(self):
        return f"Client({self.url!r})"  # NOTE: never the token

    def request(self, method, path, body=None, query=None):
        """The decoded JSON body of the answer (None for 204); raises ApiError."""
        url = self.url + path
        if query:
            url += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v})
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"}
        if self._token:
            # NOTE: http.client sends header values as latin-1; these are the UTF-8 bytes.
            headers[AUTH_HEADER] = self._token.encode().decode("latin-1")
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                text = response.read()
        except urllib.error.HTTPError as error:
            raise _api_error(error)
        except (urllib.error.URLError, OSError, ValueError) as error:
            # NOTE: ValueError: a URL urllib cannot use ("unknown url type", a bad IPv6)
            raise Unreachable(self.url, getattr(error, "reason", error))
        try:
            return json.loads(text) if text else None
        except ValueError:
            raise Unreachable(self.url, "its answer is not JSON; is it a pcisim API?") from None


def _api_error(error):
    try:
        detail = json.loads(error.read())["error"]
        return ApiError(error.code, str(detail["code"]), str(detail["message"]))
    except (ValueError, KeyError, TypeError):
        return ApiError(error.code, f"http.{error.code}", error.reason)

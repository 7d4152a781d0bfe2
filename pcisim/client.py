"""A small client of pcisim's HTTP API, used by the ``pcisim`` command line."""

import json
import urllib.error
import urllib.parse
import urllib.request

DEFAULT_URL = "http://127.0.0.1:8774"


class ApiError(Exception):
    """The API answered with an error body."""

    def __init__(self, status, code, message):
        super().__init__(f"{message} ({code}, HTTP {status})")
        self.status, self.code, self.message = status, code, message


class Unreachable(Exception):
    def __init__(self, url, reason):
        super().__init__(f"cannot reach the pcisim API at {url}: {reason}")


class Client:
    def __init__(self, url=DEFAULT_URL, timeout=30.0):
        self.url = url.rstrip("/")
        self.timeout = timeout

    def request(self, method, path, body=None, query=None):
        """The decoded JSON body of the answer (None for 204); raises ApiError."""
        url = self.url + path
        if query:
            url += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v})
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            url, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                text = response.read()
        except urllib.error.HTTPError as error:
            raise _api_error(error)
        except (urllib.error.URLError, OSError) as error:
            raise Unreachable(self.url, getattr(error, "reason", error))
        return json.loads(text) if text else None


def _api_error(error):
    try:
        detail = json.loads(error.read())["error"]
    except (ValueError, KeyError, TypeError):
        detail = {"code": f"http.{error.code}", "message": error.reason}
    return ApiError(error.code, detail["code"], detail["message"])

"""A URL's password: found, shown as `***`, or left out. Below both `location` (which
parses cache locations) and `postgres` (which hands libpq its URL), so that neither
imports the other to keep a secret out of a message.
"""

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

# libpq's query parameters that carry a secret.
_SECRET_PARAMS = frozenset({"password", "sslpassword"})


def password_of(url: str) -> str | None:
    """The password a URL carries (in its user part or its query), or None."""
    parts = urlsplit(url)
    if parts.password:
        return parts.password
    for name, value in parse_qsl(parts.query):
        if name in _SECRET_PARAMS and value:
            return value
    return None


def redact(url: str) -> str:
    """`url` with its password, if any, as `***` (user part and query alike)."""
    return _password_as(url, "***")


def without_password(url: str) -> str:
    """`url` with its password, if any, left out (libpq then reads `PGPASSWORD` or
    `~/.pgpass`): for a default that is shown, as Dagster shows its resources'."""
    return _password_as(url, None)


def _password_as(url: str, shown: str | None) -> str:
    """`url`, its password (user part and query) replaced by `shown`, or left out."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.password is not None:
        userinfo, _, host = netloc.rpartition("@")
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}:{shown}@{host}" if shown is not None else f"{user}@{host}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(name in _SECRET_PARAMS for name, _ in pairs):
            kept = [(n, shown if n in _SECRET_PARAMS else v) for n, v in pairs]
            query = urlencode([(n, v) for n, v in kept if v is not None], safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))

"""Who may use the dashboard, and which writes are really meant.

Three rules, each for one attack:

* **Token.** Bound to a non-loopback address the dashboard needs
  ``PGQUEUE_DASHBOARD_TOKEN`` (the CLI refuses to start without it). With a token, every
  page, API call and ``/metrics`` needs ``Authorization: Bearer <token>`` or the session
  cookie the login form sets (HttpOnly, SameSite=Strict); ``/healthz`` stays open for
  probes and says only "up" or "down". Tokens are compared with
  :func:`hmac.compare_digest`. The cookie holds an HMAC of the token, not the token.
* **Cross-site writes (CSRF).** A browser attaches cookies, and reaches 127.0.0.1, on
  behalf of any web page it shows. Every HTML form carries a random token that must equal
  the ``pgq_csrf`` cookie (double submit: another site can neither read nor set that
  cookie); any write whose ``Origin`` or ``Sec-Fetch-Site`` names another site is refused;
  an API write authenticated by the session cookie must repeat the CSRF cookie in an
  ``X-CSRF-Token`` header. A write carrying ``Authorization: Bearer`` is not cross-site
  (browsers never add a bearer token by themselves; Basic credentials they do, so those
  count for nothing here).
* **DNS rebinding.** On a loopback address any ``Host`` other than a loopback name is
  refused, so a hostile name resolving to 127.0.0.1 reaches nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

SESSION_COOKIE: Final = "pgq_session"
CSRF_COOKIE: Final = "pgq_csrf"
CSRF_FIELD: Final = "csrf_token"
CSRF_HEADER: Final = "x-csrf-token"
TOKEN_VARIABLE: Final = "PGQUEUE_DASHBOARD_TOKEN"  # noqa: S105 (a variable name)

# Host names that mean this machine, whatever port follows.
LOOPBACK_NAMES: Final = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


def is_loopback(host: str) -> bool:
    """Whether listening on ``host`` keeps the dashboard on this machine."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False  # any other name may resolve anywhere


def host_name(header: str) -> str:
    """The name part of a ``Host`` header (``[::1]:8080`` → ``::1``)."""
    if header.startswith("["):
        return header[1:].split("]", 1)[0]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def new_csrf_token() -> str:
    """A fresh random value for the ``pgq_csrf`` cookie."""
    return secrets.token_urlsafe(32)


def same_secret(given: str | None, expected: str | None) -> bool:
    """Constant-time equality of two secrets; False when either is missing."""
    if not given or not expected:
        return False
    return hmac.compare_digest(given.encode(), expected.encode())


@dataclass(frozen=True)
class Access:
    """The dashboard's access rules: the token (None: open) and the Host names accepted
    (None: any)."""

    token: str | None = None
    allowed_hosts: frozenset[str] | None = None

    @classmethod
    def for_bind(cls, host: str, token: str | None) -> Access:
        """The rules for a server listening on ``host``; raises ValueError (one line) for a
        non-loopback address without a token."""
        if not is_loopback(host) and not token:
            raise ValueError(
                f"refusing to serve the dashboard on {host}, a non-loopback address, without "
                f"a token: set {TOKEN_VARIABLE}, or listen on 127.0.0.1"
            )
        hosts = frozenset(LOOPBACK_NAMES) if is_loopback(host) else None
        return cls(token=token or None, allowed_hosts=hosts)

    @property
    def session_value(self) -> str | None:
        """What the session cookie holds: an HMAC of the token (rotating the token
        logs every browser out; the cookie never reveals the token)."""
        if self.token is None:
            return None
        return hmac.new(self.token.encode(), b"pgqueue-dashboard-session",
                        hashlib.sha256).hexdigest()

    def host_allowed(self, header: str | None) -> bool:
        """Whether a request's ``Host`` header is one this server answers."""
        if self.allowed_hosts is None:
            return True
        return header is not None and host_name(header).lower() in self.allowed_hosts

    def authenticated(self, authorization: str | None, session: str | None) -> bool:
        """Whether a request proves it knows the token (always, without one)."""
        if self.token is None:
            return True
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() == "bearer" and same_secret(given.strip(), self.token):
            return True
        return same_secret(session, self.session_value)


def bearer(authorization: str | None) -> bool:
    """Whether a request carries a bearer token: never added by a browser on its own,
    unlike Basic credentials a browser remembers for a proxy in front of the dashboard."""
    return (authorization or "").lower().startswith("bearer ")


def cross_site(origin: str | None, fetch_site: str | None, own_hosts: Iterable[str]) -> bool:
    """Whether a write comes from another site, as far as the browser tells us.

    ``Sec-Fetch-Site`` is ``same-origin`` or ``none`` (typed in, a bookmark) for our own
    pages; ``Origin`` is sent with every cross-origin request and every POST, and must
    name one of ``own_hosts`` (``host:port`` as the ``Host`` header has it; the scheme is
    not compared, so that a proxy terminating TLS in front of the dashboard works). A
    client that sends neither (curl, a script) is not a browser acting for another site.
    """
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        return True
    if origin is None:
        return False
    scheme, _, netloc = origin.partition("://")  # "null" (a sandboxed page) has no netloc
    return scheme not in ("http", "https") or netloc.lower() not in {
        host.lower() for host in own_hosts}

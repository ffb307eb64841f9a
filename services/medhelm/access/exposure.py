"""Is an address reachable only from this machine? ``medhelm serve`` stays as simple as before on
loopback and refuses anything wider without sign-in / caller authorization (unless --insecure-no-auth).
Pure function, no failure modes: anything that is not a loopback literal or ``localhost`` counts as exposed.
"""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False

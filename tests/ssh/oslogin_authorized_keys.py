"""sshd's AuthorizedKeysCommand for the OS Login test: the keys the metadata server's
`oslogin/users?username=U` lists for U, unexpired, one per line (what Google's
google_authorized_keys does on a real VM). Standard library only: sshd runs it with the bare
interpreter. Usage: oslogin_authorized_keys.py METADATA_BASE_URL USERNAME"""

import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request


def main(base: str, username: str) -> int:
    url = f"{base}/computeMetadata/v1/oslogin/users?" + urllib.parse.urlencode(
        {"username": username}
    )
    request = urllib.request.Request(url, headers={"Metadata-Flavor": "Google"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            profiles = json.load(response).get("loginProfiles") or []
    except urllib.error.HTTPError:
        return 0  # not an OS Login user: no keys
    now_usec = time.time() * 1_000_000
    for profile in profiles:
        for entry in (profile.get("sshPublicKeys") or {}).values():
            expiry = entry.get("expirationTimeUsec")
            if expiry is None or int(expiry) > now_usec:
                print(entry["key"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))

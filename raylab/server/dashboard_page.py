"""What the proxy adds to the dashboard's HTML so that it runs in the sandbox.

An opaque origin has no Web Storage and no cookies: reading `localStorage` or
`document.cookie` throws. Ray's dashboard reads the one while it first renders (theme,
time zone: a blank page) and the other before each API call (its login cookie: no data).
Each HTML page gets in-memory stand-ins before its own scripts; what it keeps there
lasts as long as the page (the proxy adds Ray's token itself). The script runs with the
page's rights, no more.
"""

from __future__ import annotations

import gzip
import re
from typing import Any

STORAGE_SHIM = b"""<script>
(function () {
  function memory() {
    var items = new Map();
    return {
      get length() { return items.size; },
      key: function (i) { var k = Array.from(items.keys())[i]; return k === undefined ? null : k; },
      getItem: function (k) { k = String(k); return items.has(k) ? items.get(k) : null; },
      setItem: function (k, v) { items.set(String(k), String(v)); },
      removeItem: function (k) { items.delete(String(k)); },
      clear: function () { items.clear(); }
    };
  }
  ["localStorage", "sessionStorage"].forEach(function (name) {
    try { window[name]; } catch (e) {
      Object.defineProperty(window, name, { value: memory(), configurable: true });
    }
  });
  try { document.cookie; } catch (e) {
    var jar = new Map();
    Object.defineProperty(document, "cookie", {
      configurable: true,
      get: function () {
        return Array.from(jar, function (kv) { return kv[0] + "=" + kv[1]; }).join("; ");
      },
      set: function (text) {
        var pair = String(text).split(";")[0], at = pair.indexOf("=");
        if (at > 0) { jar.set(pair.slice(0, at).trim(), pair.slice(at + 1).trim()); }
      }
    });
  }
})();
</script>"""
_HEAD = re.compile(rb"<head\b[^>]*>", re.IGNORECASE)


def add_storage_shim(response: Any) -> None:
    """A jupyter-server-proxy `rewrite_response`: the shim first in each HTML page."""
    if not response.headers.get("Content-Type", "").lower().startswith("text/html"):
        return
    body: bytes = response.body
    encoding = response.headers.get("Content-Encoding", "identity").lower()
    if encoding == "gzip":
        body = gzip.decompress(body)
        del response.headers["Content-Encoding"]
    elif encoding != "identity":
        return  # not one a head sends; the page then stays as it came
    head = _HEAD.search(body)
    at = head.end() if head else 0
    response.body = body[:at] + STORAGE_SHIM + body[at:]

"""HTTP on a plugin's behalf: the `http.fetch` op and what every world request shares.

`fetch` (the op: granted hosts only, redirects checked, secrets redacted) ·
`guard` (which URLs a grant reaches; every address spelling checked once, DNS
pinned) · `deadline` (every byte read bounded by the calling plugin's deadline) ·
`config` (the `[http]` section: caps and injected headers).
"""

"""``rlsr deploy``: deployment certificates, decisions and the audit of a running server (docs/deploy.md)."""

"""A plugin's life after it is written: rescan and hot reload (`reload`, `watch`),
bundles (`bundle`), their signatures (`signing`), recorded approvals (`approvals`)
and uninstalling (`uninstall`). See docs/lifecycle.md."""

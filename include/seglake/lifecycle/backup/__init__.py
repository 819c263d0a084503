"""Backup and disaster recovery: export snapshots to another store as bundles, import and restore them, verify them (issue 19)."""

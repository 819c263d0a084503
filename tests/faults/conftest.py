"""Fixtures of the fault suite; the harness itself lives in fault_harness.py."""

from fault_harness import etcd, fmeta, fsettings, fstore, s3_fault_settings, spawn, weed  # noqa: F401

"""Object storage: `open_store(settings)` gives the configured backend."""

from __future__ import annotations

from seglake.storage.base import DeleteError, ObjectInfo, Store


def open_store(settings) -> Store:
    uri = settings.store_uri
    if uri.startswith("s3://"):
        from seglake.storage.s3 import S3Store
        return S3Store(uri, endpoint=settings.s3_endpoint, region=settings.s3_region,
                       access_key=settings.s3_access_key, secret_key=settings.s3_secret_key,
                       max_pool=max(32, settings.copy_threads))  # a connection per copy in flight
    if "://" in uri and not uri.startswith("file://"):
        from seglake.errors import ConfigError
        raise ConfigError(f"config key 'store_uri': unsupported scheme in {uri!r} (use a path or s3://)")
    from seglake.storage.local import LocalStore
    return LocalStore(uri[len("file://"):] if uri.startswith("file://") else uri)


__all__ = ["DeleteError", "ObjectInfo", "Store", "open_store"]

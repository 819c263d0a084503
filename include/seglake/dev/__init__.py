"""Development and demo tooling, not the engine: the local stack (`devstack`: etcd,
SeaweedFS and `airflow standalone` for `make up` / `make demo`), the scale-out profile on
one machine (`cluster`: 3 etcd members, SeaweedFS, a Spark standalone cluster), and the
demo data (`demo`: seed collections in the row model)."""

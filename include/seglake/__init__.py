"""seglake: the lifecycle engine of a Milvus-style segment store.

Imports neither Airflow nor pyspark; every lifecycle step is a function over a
`Meta` (etcd) and a `Store` (object storage).
"""

__version__ = "0.1.0"

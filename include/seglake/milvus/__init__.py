"""Reading a real Milvus (2.3.x): its etcd metadata and its bucket, strictly read-only."""

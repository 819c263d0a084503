"""Write-ahead log: messages, per-pchannel logs of fragments in the store, term-fenced
writers (lifetime), the scanner adaptor (reorder, txn, vchannel filter, pause) and the
ingest client. See README "How the WAL works"."""

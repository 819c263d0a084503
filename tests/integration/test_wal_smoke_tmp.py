import pyarrow as pa
from tests.integration.wal_helpers import *
from seglake.wal.client import WalClient, synthetic_rows, wal_status
from seglake.wal import message as M

def test_smoke(meta, store, settings):
    with WalClient(meta, store, settings) as c:
        coll = make_collection(c)
        r = c.insert("c1", synthetic_rows(coll, 1000, 1))
        r2 = c.insert("c1", synthetic_rows(coll, 10, 5000), txn=True)
        d = c.delete("c1", [1, 2, 3])
        print(r, r2, d)
    for p in pchannels(coll):
        msgs = all_messages(meta, store, p, settings)
        print(p, [(m.type, m.vchannel, m.time_tick, str(m.id), m.rows) for m in msgs])
    print(wal_status(meta))

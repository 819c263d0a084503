"""S3Store builds exactly one boto3 client, however many threads ask for it first."""
import threading

from seglake.storage.s3 import S3Store


def test_threads_asking_for_the_client_together_share_one():
    store = S3Store("s3://bucket-x/p", endpoint="http://127.0.0.1:9", access_key="a", secret_key="b")
    start = threading.Barrier(8)
    got = []

    def ask():
        start.wait()
        got.append(store.client)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 8 and len({id(c) for c in got}) == 1

"""A small Spark job whose loaded classes make the tests' class-data-sharing archive
(tests/conftest.py: spark_cds_archive): a session, a DataFrame with a shuffle, Python UDF
workers, Parquet written and read back."""

import sys
import tempfile

from pyspark.sql import SparkSession, functions as F

s = (SparkSession.builder.master("local[2]").appName("seglake-cds").config("spark.ui.enabled", "false")
     .config("spark.sql.shuffle.partitions", "2").getOrCreate())
df = s.createDataFrame([(i, i * 2) for i in range(1000)], "a long, b long")
rows = df.groupBy((df.a % 3).alias("k")).agg(F.count("*"), F.sum("b")).collect()
rdd = s.sparkContext.parallelize(range(100), 4).map(lambda x: x * x).sum()
with tempfile.TemporaryDirectory() as d:
    df.write.parquet(f"{d}/t")
    back = s.read.parquet(f"{d}/t").count()
s.stop()
sys.exit(0 if len(rows) == 3 and back == 1000 and rdd == 328350 else 1)

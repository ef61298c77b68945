"""Spark Columns and schemas that mirror the Spark-free spec.

``transforms`` gives each partition transform as Spark Columns (``murmur3`` for the
bucket hash, JVM-native where exact), ``spec_transforms`` maps Spark's ``PARTITIONED BY``
transforms to spec fields, ``schema`` converts Spark schemas to namespace schemas and back
(and merges a DataFrame's new columns into a namespace).

May import: :mod:`partitioning`. Imported by every other pipelines package.
"""

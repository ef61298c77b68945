"""The partition spec and the namespace schema: frozen models and pure Arrow functions.

``partition_spec`` holds the spec and field models with their exact JSON round trip;
``partition_by`` reads the text users write. ``transforms`` has one Arrow implementation per
transform, on the value rules of ``values``, the integer and decimal arithmetic of
``truncation``, vectorized ``murmur3`` and its scalar form ``scalar_hash``. ``expression``
evaluates expression fields with DataFusion after ``expression_safety`` has checked them.
``schema`` is the namespace schema (its field ids from ``field_ids``, its JSON text from
``arrow_json``); ``vectors`` says which columns are vectors.

May import: :mod:`partitioning.sql`, :mod:`partitioning.errors`. Imported by storage, state and above.
"""

"""The partitioned namespace as other Lance clients see it.

``namespace_api`` implements ``lance_namespace.LanceNamespace`` over a root:
``lance_namespace.connect("partitioned", {"root": ...})`` browses the spec versions and
partition namespaces ``__manifest`` records, with their runtime properties, and describes
each partition table at its committed ``read_version``; ``table_versions`` names the
committed versions' manifests for Lance's managed versioning, so pylance's own
``lance.dataset(namespace_client=...)`` opens exactly those. Changes are refused with the
project call to use instead. ``rest`` serves the same over the Lance Namespace REST
protocol (:class:`~partitioning.service.rest.NamespaceServer`, ``jobs/serve.py``), on
Starlette and uvicorn; ``rest_guards`` holds its defences against hostile clients (timeouts,
body limits, token and input checks).
``arrow`` reads the rows as an Arrow stream DuckDB and Polars scan (``dataset``) and
writes Arrow tables without Spark (``write_arrow``).

May import: :mod:`partitioning.namespace` and everything below it, :mod:`partitioning.plan`
(table rows) and :mod:`partitioning.tables` (the write). Imported by
``partitioning/__init__.py`` (which also registers the client with ``lance_namespace``) and ``jobs/serve.py``.
"""

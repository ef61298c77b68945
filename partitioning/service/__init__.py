"""The partitioned namespace as other Lance clients see it.

``namespace_api`` implements ``lance_namespace.LanceNamespace`` over a root:
``lance_namespace.connect("partitioned", {"root": ...})`` browses the spec versions and
partition namespaces ``__manifest`` records, with their runtime properties, and describes
each partition table at its committed ``read_version``. Changes are refused with the
project call to use instead.

May import: :mod:`partitioning.namespace` and everything below it. Imported by nothing in
the project: ``partitioning/__init__.py`` registers it with ``lance_namespace`` by name.
"""

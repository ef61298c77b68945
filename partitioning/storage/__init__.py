"""What lies on storage under a namespace root, and how it is changed safely.

``roots`` says what a root means and which storage options reach it; ``paths`` joins URIs
below it and refuses any that leave it; ``locations`` names partition tables and their
directories. ``manifest`` is the ``__manifest`` Lance table store, with ``staged`` root
properties and the ``history`` of its versions (its latest version found without listing
every one). ``datasets`` writes and commits fragments of
partition datasets and ``alignment`` brings a dataset in line with ``__manifest``. The
concurrency rules: ``leases`` (written by operations) and ``lease_files`` (read by vacuum),
``guard`` (the protected path of every commit), ``intents`` (a turn for an operation that
keeps losing). ``orphans`` finds what failed writes left, ``unborn`` removes a namespace.

May import: :mod:`partitioning.spec`, :mod:`partitioning.sql`, :mod:`partitioning.errors`.
Imported by state and above.
"""

"""A store in an S3-compatible bucket: the local pipeline (scan, read, restore) with objects for files.

``objects`` is the only module that imports boto3 (the ``s3`` extra); ``layout`` names keys and parses
``s3://`` URLs; ``leases`` is the whole lock protocol; ``publish``, ``download`` and ``verify_gc`` are
the steps; ``store`` is the face that :class:`~artifactkit.store.store.Store` dispatches to.
"""

"""The bucket backend: the one store's stages over objects in an S3-compatible bucket.

``backend`` implements :class:`~artifactkit.store.backend.Backend` (what ``Store("s3://...")`` gets from the
registry); ``transfer`` is its publish transaction (uploads per batch, the conditional claim); ``download``
fetches and checks blobs beside DEST; ``layout`` names keys and parses ``s3://`` URLs; ``leases`` is the whole
lock protocol; ``objects`` (with ``connect``, its credentials and endpoint) is the only code that talks to the client
libraries of the ``s3`` extra.
"""

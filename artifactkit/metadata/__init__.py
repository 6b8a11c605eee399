"""The metadata model and its rules: what an entry is, how to capture it, set it, compare it, explain it.

``model`` (:class:`FileMeta`, ``capture``), ``times`` (exact ``utime`` with read-back, directory order),
``compare`` (:class:`Mismatch`, ``compare``, ``assert_metadata_equal``) and ``drift`` (the classifier
that names *how* a value went wrong). It sits at the bottom: it may import only ``artifactkit.errors``
and ``artifactkit._syscalls``; everything else may import it.
"""

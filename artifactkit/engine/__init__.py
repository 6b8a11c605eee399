"""The per-file work of a publish and a download behind one door (:mod:`~artifactkit.engine.protocol`): the
reference engine (:mod:`~artifactkit.engine.reference`, the specification) and the native core's."""

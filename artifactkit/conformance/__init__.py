"""Hold any copy tool or store to the exact-metadata rules: ``checks`` (the run), ``report`` (the
report and its JSON), ``classify`` (which check each difference counts against), ``destination``
(where the copier writes and how the kit reads the copy), ``copiers`` (turning a template,
``module:function`` or a named adapter into a copy step) and ``corpus`` (the declarative TOML trees
with historical ns times, and ``materialize``).

It may import ``metadata``, ``store`` and ``isolation``; trace and cli build on it. Importing this
package gives the public conformance API: ``from artifactkit import conformance; conformance.check(...)``.
"""

from artifactkit.conformance.checks import CHECKS, SCHEMA, CheckResult, Failure, Report, check
from artifactkit.conformance.corpus import corpus_names, materialize

__all__ = ["CHECKS", "SCHEMA", "CheckResult", "Failure", "Report", "check", "corpus_names", "materialize"]

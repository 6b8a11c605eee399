"""The reference engine: every step in this process, one file after another, simple by design; the native core
is held to what it does."""

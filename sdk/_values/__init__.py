"""Value types below every layer: what the core, the providers and the engine all read.

Nothing here imports a module above it. The provider profiles live here (`sdk._values.profile`
and the built-in families in `sdk._values.families`), so that the core (`sdk.stop_reason`,
`sdk.schema`, `sdk.parsing`) can look a provider up without importing a provider module.
"""

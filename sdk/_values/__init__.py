"""Value types below every layer: what the core, the providers and the engine all read.

Nothing here imports a module above it. The provider profiles' type and registry live here
(`sdk._values.profile`), so that the core (`sdk.stop_reason`, `sdk.schema`, `sdk.parsing`) can
look a provider up by name without importing a provider module; each family's profile is in
its provider module, which the registry imports by name on first lookup.
"""

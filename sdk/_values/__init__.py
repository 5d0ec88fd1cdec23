"""Value types below every layer: what the core, the providers and the engine all read.

Nothing here imports a module above it:

- `records`: the small records errors, the parser and results all carry (`Usage`, `Note`, ...);
- `content`: message content as parts (text, images, PDF documents);
- `pointer`: JSON pointers and local `$ref` resolution; `position`: where in a text something
  went wrong (line and column in characters);
- `declared`: a setting declared once (type and range) and checked where it is set;
- `dialect` and `profile`: the provider profiles' type and registry, so that the core
  (`sdk.stop_reason`, `sdk.schema`, `sdk.parsing`) can look a provider up by name without
  importing a provider module; each family's profile is in its provider module, which the
  registry imports by name on first lookup.
"""

"""The SDK's own provider families' profiles, one small module each (no vendor SDK imported).

Each module lists its profiles in `PROFILES`; `sdk._values.profile.builtin_profiles()` loads
them all on the first lookup. The codecs (`sdk.providers.<family>`) import their profile from
here: a codec module imports its vendor's SDK, which a name or a stop reason must not need.
"""

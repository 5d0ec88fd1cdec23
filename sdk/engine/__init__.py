"""The call engine: what happens between a client method and a provider's driver.

A call is an output kind (what is asked for and how a reply is judged) driven by one attempts
machine (retries, budget, deadline, fallback); the clients only move data between the machine
and the provider. Nothing here is public API: the public names are re-exported by `sdk`.
"""

"""The model layer: one provider interface (base), the provider configuration (config), the configured providers
and models (registry), and the host's own provider kinds: openai and scripted (plugins add their own)."""

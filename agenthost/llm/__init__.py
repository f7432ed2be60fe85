"""The model layer: one provider interface (base), the provider configuration (config), the configured providers
and models (registry), and the built-in provider kinds: openai, scripted, simulated."""

"""Built-in plugins: ordinary plugins that happen to ship with the core (DESIGN §2)."""

"""Integrations with other frameworks; each needs its framework installed."""

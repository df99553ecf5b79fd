"""Bundled offline demo data."""

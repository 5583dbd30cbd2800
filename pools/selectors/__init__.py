"""Reads: database rows to what pages, the API and the core need, starting from the caller's visibility."""

"""The PostgreSQL backend: ``postgresql://`` (and ``postgres://``) URLs.

Submodules: `schema` (tables and migrations). The queue itself is being built
(issue 14).
"""

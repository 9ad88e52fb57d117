"""The Hydra configs; this file makes them the package ``dpgen.configs`` of an installed wheel (Hydra reads
them through ``pkg://dpgen.configs``; pyproject.toml maps this folder onto it)."""

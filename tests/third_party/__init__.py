"""Third-party Triton kernel libraries judged through references written from their
sources, as a user of numoracle would (docs/results/2026-12-02-third-party-fla.md)."""

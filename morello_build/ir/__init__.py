"""The values the synthesizer works on: specs (what to compute), layouts, and Impl trees (programs)."""

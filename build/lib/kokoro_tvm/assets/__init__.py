"""Model assets: KModel weights and config, and voice packs, from the source config.yaml names."""

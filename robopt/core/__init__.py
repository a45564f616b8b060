"""Algorithm-independent building blocks: protocols, losses, advantages, normalization, updaters."""

"""Speaker-embedding models and the loading of their checkpoints, shared by training and evaluation."""

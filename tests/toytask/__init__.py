"""A throwaway task that no file of scratchformer names: a one-layer text classifier ("num" or
"word") over hashed characters, on ten rows. tests/test_toy_task.py registers its face
(`tasks.faces.register`) and serve's backend for it (`serve.backends.register_backend`), then
runs every tool on it: the proof that a new task is its own package and nothing else."""

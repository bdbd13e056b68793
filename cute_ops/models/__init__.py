"""Models assembled from cute_ops' kernels. `cute_ops.models.llama`: LLaMA-2/3 with a paged KV cache."""

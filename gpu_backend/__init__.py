"""The PyTorch serving engine with a paged KV pool owned by the radix cache.

Empty until the gpu_backend issue lands; see DESIGN.md section 2.
"""

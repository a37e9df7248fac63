"""WaveAlign inside model code: ``attention.BlockSparseAttention`` (mask -> skip -> reorder -> kernel -> restore for
one attention call, framework-free) and the adapters that install it in a framework: ``diffusers`` (Wan's
self-attention processors). Importing this package imports no framework.
"""

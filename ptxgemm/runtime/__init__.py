"""The CUDA driver and what lives on the device: contexts, modules and launches (driver), the thread's current
device and context (devices), device arrays (arrays), the DLPack and CUDA-array-interface protocols (interop),
tensor maps, graphs, the strided copy kernel (relayout), debug stall records and the timing method."""

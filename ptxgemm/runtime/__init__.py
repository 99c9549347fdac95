"""The CUDA driver and what lives on the device: context, modules and launches (driver), device arrays
(arrays), the DLPack and CUDA-array-interface protocols (interop), tensor maps, graphs, the strided copy kernel
(relayout), debug stall records and the timing method."""

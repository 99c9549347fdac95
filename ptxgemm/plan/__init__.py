"""Planning one call, on descriptors alone: the dtype rules (checks), the operands' layouts and staging
(operands), the fused epilogue (epilogue), and the one planning pass that ties them to a config (call)."""

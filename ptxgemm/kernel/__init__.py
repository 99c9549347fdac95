"""The kernel: what a GEMM is (GemmConfig, every number derived from it) and how it becomes PTX (the jinja2
templates in templates/, rendered by codegen). Nothing here touches a GPU or a toolchain."""

"""Tools that show what the hardware does and check the kernel: the per-warpgroup trace, the mutation
tester, bank-conflict models and probes, the dump of PTX/SASS/report, the plan emulator and the fuzzer."""

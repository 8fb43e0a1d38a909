"""numoracle's own soundness tools: the ``emulator`` (a reference program's precision plan
executed the way a kernel would, with reduction orders, FMA choices and math-library
errors drawn per run, or planted faults) and the ``programs`` it runs in the soundness
and planted-fault tests."""

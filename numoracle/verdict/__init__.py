"""The verdict core: everything between a reference program and a verdict, raising on
nothing but malformed arguments.

- ``evaluation``: the reference program under the error calculus on the kernel's inputs,
  and each output's acceptance region (``regions``);
- ``judgement``: the rounding-interval check of stored outputs, per output and mode;
- ``verdict``: accept / reject / uncertified from the judgements, with the fixed-input
  confirmation of statistical rejects; ``explain``: its text;
- ``compiled``: the same code fused by torch.compile for repeated signatures.

``numoracle.check`` is the public layer above it; the emulator, the runner and the
studies use it too.  Nothing here imports them back.
"""

"""A user's own project, as numoracle's end-to-end tests see it: a fused residual-add
RMSNorm kernel in Triton (``kernels``), a copy of it with a planted fault
(``kernels_faulty``), the reference program of its precision plan (``reference``) and the
operator that bundles them (``ops:my_op``).  Nothing here is part of numoracle: it uses
only numoracle's public API, as a project outside it would."""

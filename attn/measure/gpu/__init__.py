"""The GPU suite, one concern a module: sizes, cases (running and timing one case), provenance, ceilings, core,
layer, decode, cuda_tests, report (reading a result) and suite (the run); plots draws a result for lesson 6.
"""

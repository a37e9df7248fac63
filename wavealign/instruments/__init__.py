"""Honest measurement of attention kernels: CUDA-event timing, Nsight Compute counters, derived figures.

``timing`` times a launch (warm-up, L2 flushed between repetitions, median and IQR, compile time apart);
``ncu`` runs a program under Nsight Compute and parses its counters into records; ``derived`` turns
times and bytes into effective TFLOP/s, the 1/rho bound and its gap, and operational intensity.
"""

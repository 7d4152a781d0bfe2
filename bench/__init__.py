"""pcisim's benchmarks: ``make bench`` runs them all; each also runs alone.

Every benchmark compares against a reference measured in the same run and prints the
ratio; none of them asserts a timing.
"""

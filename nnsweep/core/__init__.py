"""The vocabulary every layer shares, with no I/O and nothing heavy: the error tree,
the deployment configuration, the runtime registry, a trial's record, and the shapes
that pass between converters and runners. Imports nothing else of nnsweep."""
